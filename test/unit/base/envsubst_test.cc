#include "src/base/envsubst.h"

#include <gtest/gtest.h>

namespace hyperslice {
namespace {

TEST(ParseEnvFile, KeepsValuesAsWrittenAndSkipsCommentsAndBlankLines) {
  auto vars = ParseEnvFile(
      "# a comment\n\nPROJECT=my-gcp-project\nURL=https://x/?a=b\nEMPTY=\nnot a pair\nLAST=1");
  EXPECT_EQ(vars.size(), 4u);
  EXPECT_EQ(vars["PROJECT"], "my-gcp-project");
  EXPECT_EQ(vars["URL"], "https://x/?a=b");  // only the first '=' splits
  EXPECT_EQ(vars["EMPTY"], "");
  EXPECT_EQ(vars["LAST"], "1");  // no trailing newline
}

TEST(Envsubst, ReplacesBothFormsAndLeavesTheRest) {
  std::map<std::string, std::string> vars{{"NS", "default"}, {"NAME", "g"}};
  auto out = Envsubst("ns: $NS\nlabel: ${NS}-$NAME\nprice: 10 USD\n", vars);
  ASSERT_TRUE(out.ok()) << out.error().ToString();
  EXPECT_EQ(*out, "ns: default\nlabel: default-g\nprice: 10 USD\n");
}

TEST(Envsubst, AnUnsetVariableIsAnErrorNamingIt) {
  auto out = Envsubst("image: $IMAGE\n", {{"NS", "default"}});
  ASSERT_FALSE(out.ok());
  EXPECT_EQ(out.error().code, Error::Code::kInvalidArgument);
  EXPECT_NE(out.error().message.find("$IMAGE"), std::string::npos) << out.error().message;
  EXPECT_FALSE(Envsubst("cost: $ 5\n", {}).ok());  // a lone '$' names nothing
}

}  // namespace
}  // namespace hyperslice
