// The Paperspace price table: the built-in table parses and normalises, a user's table replaces
// entries, and bad tables fail with errors that name the entry and key.
#include <gtest/gtest.h>

#include "src/gpu/normalize.h"
#include "src/gpu/providers/paperspace/price_table.h"

namespace hyperslice::gpu::providers::paperspace {
namespace {

TEST(PaperspacePriceTable, BuiltInParsesAndEveryEntryNormalises) {
  auto t = ParsePriceTable(BuiltInPriceTableYaml());
  ASSERT_TRUE(t.ok()) << t.error().message;
  EXPECT_FALSE(t->version.empty());
  ASSERT_GE(t->entries.size(), 8u);
  for (const auto& e : t->entries) {
    EXPECT_TRUE(NormalizeGpu(kPaperspace, e.gpu, e.gpu_memory_gib).known) << e.machine_type;
    EXPECT_GT(e.price, 0) << e.machine_type;
    for (const auto& r : e.regions) EXPECT_TRUE(r == "ny2" || r == "ca1" || r == "ams1") << r;
  }
  const auto* a = t->Find("A100-80G");
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(a->price, 3180000);
  EXPECT_EQ(NormalizeGpu(kPaperspace, a->gpu, a->gpu_memory_gib).name, "A100-80GB");
}

TEST(PaperspacePriceTable, UserTableReplacesAndAdds) {
  auto t = LoadPriceTable(R"(version: "user-1"
machineTypes:
  A4000:
    gpu: A4000
    gpuCount: 1
    gpuMemoryGiB: 16
    vcpus: 8
    memoryGiB: 45
    priceUsd: 0.99
    regions: [ny2]
  RTX5000:
    gpu: RTX5000
    gpuCount: 1
    gpuMemoryGiB: 16
    vcpus: 8
    memoryGiB: 30
    priceUsd: "0.82"
    regions: [ca1]
)");
  ASSERT_TRUE(t.ok()) << t.error().message;
  auto base = ParsePriceTable(BuiltInPriceTableYaml());
  ASSERT_TRUE(base.ok());
  EXPECT_EQ(t->version, base->version + "+user-1");
  EXPECT_EQ(t->entries.size(), base->entries.size() + 1);
  ASSERT_NE(t->Find("A4000"), nullptr);
  EXPECT_EQ(t->Find("A4000")->price, 990000);
  EXPECT_EQ(t->Find("A4000")->regions, std::vector<std::string>{"ny2"});
  ASSERT_NE(t->Find("RTX5000"), nullptr);
  EXPECT_EQ(t->Find("RTX5000")->price, 820000);
  EXPECT_EQ(t->Find("H100")->price, base->Find("H100")->price);  // untouched entries stay
}

std::string Entry(const std::string& price, const std::string& regions = "[ny2]") {
  return "version: v\nmachineTypes:\n  A4000:\n    gpu: A4000\n    gpuCount: 1\n"
         "    gpuMemoryGiB: 16\n    vcpus: 8\n    memoryGiB: 45\n    priceUsd: " +
         price + "\n    regions: " + regions + "\n";
}

TEST(PaperspacePriceTable, BadTablesGiveClearErrors) {
  struct Case {
    std::string yaml;
    std::string want;  // part of the message
  };
  const Case cases[] = {
      {"version: v\nmachineTypes: [unclosed", "paperspace price table: YAML"},
      {"just a string", "document"},
      {"machineTypes: {}", "version: missing"},
      {"version: v\n", "machineTypes"},
      {Entry("\"abc\""), "machineTypes.A4000.priceUsd: \"abc\" is not a decimal"},
      {Entry("\"-1.50\""), "machineTypes.A4000.priceUsd"},
      {Entry("\"0\""), "machineTypes.A4000.priceUsd: must be greater than zero"},
      {Entry("[1, 2]"), "machineTypes.A4000.priceUsd: must be a decimal"},
      {Entry("\"0.76\"", "[]"), "machineTypes.A4000.regions"},
      {"version: v\nmachineTypes:\n  A4000:\n    gpu: A4000\n    gpuCount: two\n",
       "machineTypes.A4000.gpuCount: must be a number, got \"two\""},
      {"version: v\nmachineTypes:\n  A4000:\n    gpuCount: 1\n", "machineTypes.A4000.gpu: missing"},
  };
  for (const auto& c : cases) {
    auto t = ParsePriceTable(c.yaml);
    ASSERT_FALSE(t.ok()) << c.yaml;
    EXPECT_EQ(t.error().code, Error::Code::kInvalidArgument);
    EXPECT_NE(t.error().message.find(c.want), std::string::npos)
        << "message: " << t.error().message << "\nwant: " << c.want;
    // A bad user table fails the whole load (the client is not built with half a table).
    EXPECT_FALSE(LoadPriceTable(c.yaml).ok());
  }
  EXPECT_TRUE(ParsePriceTable(Entry("\"0.76\"")).ok());
}

}  // namespace
}  // namespace hyperslice::gpu::providers::paperspace
