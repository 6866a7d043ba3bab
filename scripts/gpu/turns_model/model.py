# A scheduling model of the sm90 forward's producer / consumer / ping-pong-turn protocol
# (src/cuda/sm90/flash_fwd_sm90.cuh and scripts/gpu/prepared/sm90_fwd_loose_turns.patch), to
# look for hangs without a GPU: the producer and the two consumer warpgroups are generators
# whose steps wait on conditions (ring slots loaded / released, Q buffers, the tile index, the
# turns); a random scheduler with per-actor weights runs them and reports 'DEADLOCK' when no
# actor can move. tiles: list of (key blocks, warpgroup 0 skips the last block, unused).
# S: K/V stages; KQ: Q buffers. Written in session 31 to review the loose turns (its findings:
# the initial word must mark both warpgroups away, and a warpgroup that has to wait for K or V
# must be away meanwhile: mode='loose', init_away=True, away_on_wait=True).
#   python3 scripts/gpu/turns_model/model.py            # fixed cases, every switch
#   python3 scripts/gpu/turns_model/search.py 4 2 1 1 fix 0 200   # random tile sequences
# mode: 'strict' or 'loose'; fix options: init_away, keep_comp (compensating turns in loose, away after them)
import random


def run(tiles, S, KQ, mode, first=True, finish=True, init_away=False, keep_comp=False, rejoin_in_take=False, away_on_wait=False, rejoin_claim=False, present_at_turn=False, seed=0, wslow=(1,1), maxsteps=200000, log=None):
    L = (lambda m: log.append(m)) if log is not None else (lambda m: None)
    rng = random.Random(seed)
    st = dict(bit0=0, away=[init_away, init_away], avail=[1 if mode=='strict' else 0, 0])
    kload=set(); vload=set(); krel=[set(),set()]; vrel=[set(),set()]
    qfull=set(); qrel=[set(),set()]; published={}; readp=[set(),set()]
    def turns(n): return n-1+(1 if first else 0)+(1 if finish else 0) if n>0 else 0
    # producer as generator of (condition, action)
    def producer():
        kv=0
        for p in range(len(tiles)+1):
            valid = p < len(tiles)
            n = tiles[p][0] if valid else 0
            def lk(i, kv=kv):
                j=kv+i
                yield lambda: j<S or all((j-S) in krel[c] for c in (0,1))
                kload.add(j)
            def lv(i, kv=kv):
                j=kv+i
                yield lambda: j<S or all((j-S) in vrel[c] for c in (0,1))
                vload.add(j)
            if KQ==1 and n>0: yield from lk(0)
            yield lambda: p<KQ or (p-KQ) in qrel[0]
            if p>0: yield lambda: all((p-1) in readp[c] for c in (0,1))
            published[p]=(valid, tiles[p] if valid else None); yield None
            for c in (0,1):
                if c>0 and valid: yield lambda c=c: p<KQ or (p-KQ) in qrel[c]
                if n>0 or valid: qfull.add((p,c)); yield None
            if not valid: return
            if KQ>1 and n>0: yield from lk(0)
            for i in range(n):
                if i+1<n: yield from lk(i+1)
                yield from lv(i)
            kv+=n
    def consumer(c):
        o=1-c; kv=0
        def take(lbl=''):
            if mode=='strict':
                yield lambda: st['avail'][c]>0
                st['avail'][c]-=1
                L(f'W{c} take {lbl}'); return
            else:
                if rejoin_in_take or present_at_turn: st['away'][c]=False
                yield lambda: st['bit0']==c or st['away'][o]
            L(f'W{c} take {lbl}')
        def pas():
            if mode=='strict': st['avail'][o]+=1
            else:
                st['bit0']=o
                if present_at_turn: st['away'][c]=True
            yield None
        def away(v):
            if mode=='loose':
                st['away'][c]=v; L(f'W{c} away={v}')
                if rejoin_claim and not v: st['bit0']=c
            yield None
        if mode=='strict' and c==1: pass  # initial pass modelled by avail init
        for p in range(len(tiles)+1):
            yield lambda: p in published
            valid,t = published[p]
            if not valid:
                yield from away(True); return
            readp[c].add(p); yield None
            yield lambda: (p,c) in qfull
            n, sk0, sk1 = t
            skip = (sk0 if c==0 else sk1)
            nw = n - (1 if skip else 0)
            if n==0: qrel[c].add(p)
            if nw>0:
                yield lambda j=kv: j in kload
                if not rejoin_in_take: yield from away(False)
                if first: yield from take(f'block0 {kv}')
                if first: yield from pas()
                krel[c].add(kv)
                if nw==1: qrel[c].add(p)
                yield None
                for i in range(1,nw):
                    j=kv+i
                    if away_on_wait and mode=='loose' and not (j in kload and (j-1) in vload):
                        yield from away(True)
                        yield lambda j=j: j in kload and (j-1) in vload
                        yield from away(False)
                    yield lambda j=j: j in kload and (j-1) in vload
                    yield from take(f'step {j}'); yield from pas()
                    krel[c].add(j)
                    if i==nw-1: qrel[c].add(p)
                    yield None
                    vrel[c].add(j-1); yield None
                j=kv+nw-1
                if away_on_wait and mode=='loose' and not (j in vload):
                    yield from away(True)
                    yield lambda j=j: j in vload
                    yield from away(False)
                yield lambda j=j: j in vload
                if finish: yield from take(f'finish {j}')
                if finish: yield from pas()
                if not (keep_comp and skip): yield from away(True)
                vrel[c].add(j); yield None
                kv+=n
            if skip:
                if nw==0: kv+=n
                ncomp = turns(n)-turns(nw)
                if mode=='loose' and not keep_comp: ncomp=0
                if keep_comp and mode=='loose' and not rejoin_in_take and ncomp>0: yield from away(False)
                for _ in range(ncomp):
                    yield from take(f'comp {kv-1}'); yield from pas()
                if keep_comp: yield from away(True)
                j=kv-1
                yield lambda j=j: j in kload
                krel[c].add(j); yield None
                yield lambda j=j: j in vload
                vrel[c].add(j); yield None
                if nw==0: qrel[c].add(p)
    sim_state=(st,kload,vload,krel,vrel,qfull,qrel,published,readp)
    actors=[producer(), consumer(0), consumer(1)]
    pending=[None,None,None]; done=[False]*3
    weights=[1, wslow[0], wslow[1]]
    for step in range(maxsteps):
        en=[]
        for a in range(3):
            if done[a]: continue
            if pending[a] is None or pending[a]():
                en.append(a)
        if not en:
            if all(done): return 'ok'
            L(f'pending producer kload={max(kload) if kload else None} vload={max(vload) if vload else None} krel={[max(x) if x else None for x in krel]} vrel={[max(x) if x else None for x in vrel]} qrel={[sorted(x) for x in qrel]} st={st}')
            return 'DEADLOCK'
        a = rng.choices(en, [weights[x] for x in en])[0]
        pending[a]=None
        try:
            while True:
                cond = next(actors[a])
                if cond is None: break  # one atomic action done, reschedule
                if not cond(): pending[a]=cond; break
        except StopIteration:
            done[a]=True
    return 'timeout'

def causal256(ms):  # D256 fast causal aligned tiles: m-block m -> 2m+2 blocks, WG0 skips last
    return [(2*m+2, True, False) for m in ms]

if __name__=='__main__':
    cases = {
      'A first tile WG0 n_wg=0 then n=0': [(1,True,False),(0,False,False),(0,False,False)],
      'A first tile WG0 n_wg=0 twice': [(1,True,False),(1,True,False)],
      'C causal256': causal256([3,3,3,3,2,2,2,1,1,0,0]),
      'nonskip D128-like': [(5,False,False),(5,False,False),(4,False,False),(3,False,False),(1,False,False),(2,False,False)],
      'mixed256': [(4,True,False),(1,True,False),(6,True,False),(0,False,False),(3,True,False),(5,True,False)],
    }
    configs = [
      ('strict', dict(mode='strict')),
      ('loose(patch)', dict(mode='loose')),
      ('loose init_away', dict(mode='loose', init_away=True)),
      ('loose keep_comp', dict(mode='loose', keep_comp=True)),
      ('loose keep_comp+init_away', dict(mode='loose', keep_comp=True, init_away=True)),
      ('loose keep_comp+rejoin_in_take+init_away', dict(mode='loose', keep_comp=True, rejoin_in_take=True, init_away=True)),
    ]
    for S,KQ in ((2,1),(4,2)):
      for ft,fi in ((True,True),(False,True),(True,False),(False,False)):
        for cname, tiles in cases.items():
          for name,kw in configs:
            res={}
            for seed in range(600):
                ws = [(1,1),(1,3),(3,1),(1,10),(10,1)][seed%5]
                r = run(tiles,S,KQ,first=ft,finish=fi,seed=seed,wslow=ws,**kw)
                res[r]=res.get(r,0)+1
            if 'DEADLOCK' in res or 'timeout' in res:
                print(f"S={S} KQ={KQ} first={ft} finish={fi} | {cname:35s} | {name:42s} | {res}")
