// The public header compiles on its own: this translation unit includes nothing else. Built as
// an object library (tests/api/CMakeLists.txt); a missing include in the header fails the build.
#include <tileattn/tileattn.hpp>
