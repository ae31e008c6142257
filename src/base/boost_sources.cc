// Debian's Boost 1.81 ships Boost.JSON and Boost.URL as headers only (no libboost_json/_url), so
// their compiled parts are built here, once, as both libraries document for header-only use.
#include <boost/json/src.hpp>
#include <boost/url/src.hpp>
