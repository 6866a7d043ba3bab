# Random tile sequences through model.py: search.py S KQ first_turn finish_turn {strict|patch|fix|claim|claiminit} skip(0/1) trials
import random, sys

import model as sim
S,KQ,ft,fi = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]=='1', sys.argv[4]=='1'
kw = dict(mode='loose', rejoin_claim=True) if sys.argv[5]=='claim' else dict(mode='loose', rejoin_claim=True, init_away=True) if sys.argv[5]=='claiminit' else dict(mode='loose') if sys.argv[5]=='patch' else dict(mode='loose', init_away=True, away_on_wait=True) if sys.argv[5]=='fix' else dict(mode='strict')
skipok = sys.argv[6]=='1'
rng=random.Random(1)
bad=0; tot=0
for trial in range(int(sys.argv[7])):
    nt=rng.randint(2,7)
    tiles=[]
    for _ in range(nt):
        n=rng.choice([0,1,1,2,2,3,4,5,6,8])
        sk = skipok and n>0 and rng.random()<0.6
        tiles.append((n,sk,False))
    for seed in range(20):
        ws=[(1,1),(1,3),(3,1),(1,10),(10,1)][seed%5]
        r=sim.run(tiles,S,KQ,first=ft,finish=fi,seed=seed*1000+trial,wslow=ws,**kw)
        tot+=1
        if r!='ok':
            bad+=1
            if bad<=3: print(r, tiles, seed, ws)
print(sys.argv[1:], 'bad',bad,'of',tot)
