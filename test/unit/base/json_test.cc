// Field access that never throws (src/base/json.h): the pointer overloads that chain through an
// absent object, and the strings of an array.
#include "src/base/json.h"

#include <gtest/gtest.h>
#include <boost/json/parse.hpp>

namespace hyperslice::jsonfield {
namespace {

boost::json::object Parse(std::string_view text) { return boost::json::parse(text).as_object(); }

TEST(JsonField, PointerOverloadsReadAnAbsentObjectAsAbsent) {
  const boost::json::object o = Parse(R"({"request":{"uid":"u1","n":3,"a":[1],"m":{}}})");
  const boost::json::object* request = ObjectField(&o, "request");
  ASSERT_NE(request, nullptr);
  EXPECT_EQ(StringField(request, "uid"), "u1");
  EXPECT_EQ(IntField(request, "n"), 3);
  EXPECT_NE(ArrayField(request, "a"), nullptr);
  EXPECT_NE(ObjectField(request, "m"), nullptr);

  const boost::json::object* missing = ObjectField(&o, "response");
  EXPECT_EQ(missing, nullptr);
  EXPECT_EQ(StringField(missing, "uid"), "");
  EXPECT_EQ(IntField(missing, "n"), std::nullopt);
  EXPECT_EQ(ArrayField(missing, "a"), nullptr);
  EXPECT_EQ(ObjectField(missing, "m"), nullptr);
  // A field of another type reads as absent through a pointer too.
  EXPECT_EQ(StringField(request, "n"), "");
  EXPECT_EQ(ObjectField(request, "uid"), nullptr);
}

TEST(JsonField, StringsFieldKeepsTheStringElementsInOrder) {
  const boost::json::object o = Parse(R"({"tags":["a",1,"b",null,"c"],"one":"a"})");
  EXPECT_EQ(StringsField(o, "tags"), (std::vector<std::string>{"a", "b", "c"}));
  EXPECT_TRUE(StringsField(o, "one").empty());
  EXPECT_TRUE(StringsField(o, "absent").empty());
}

}  // namespace
}  // namespace hyperslice::jsonfield
