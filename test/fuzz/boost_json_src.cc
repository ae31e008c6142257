// The fuzz target is linked without hyperslice's libraries (they are not built with coverage
// instrumentation), so Boost.JSON's compiled part is built here, instrumented.
#include <boost/json/src.hpp>
