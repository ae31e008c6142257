#include "test/testenv/corpus.h"

#include <algorithm>
#include <cctype>
#include <sstream>

#include <yaml-cpp/yaml.h>

#include <boost/json.hpp>

#include "test/testenv/files.h"

namespace hyperslice::testenv {

namespace fs = std::filesystem;
namespace json = boost::json;

CorpusCase LoadCorpusCase(const fs::path& path) {
  CorpusCase c;
  c.file = path.filename().string();
  c.text = ReadFile(path);
  std::istringstream lines(c.text);
  for (std::string line; std::getline(lines, line) && line.rfind('#', 0) == 0;) {
    if (line.rfind("# Case: ", 0) == 0) c.what = line.substr(8);
    if (line.rfind("# Expect: ", 0) == 0) c.expect = line.substr(10);
    if (line.rfind("# Warn: ", 0) == 0) c.warn = line.substr(8);
  }
  try {
    YAML::Node doc = YAML::Load(c.text);
    c.kind = doc["kind"].as<std::string>("");
    c.name = doc["metadata"]["name"].as<std::string>("");
    c.ns = doc["metadata"]["namespace"].as<std::string>("");
  } catch (const std::exception&) {
    // A case whose YAML does not parse keeps what it has; the test says what is missing.
  }
  return c;
}

std::vector<fs::path> CorpusFiles(const fs::path& dir) {
  std::vector<fs::path> files;
  for (const auto& e : fs::directory_iterator(dir)) {
    if (e.is_regular_file() && e.path().extension() == ".yaml") files.push_back(e.path());
  }
  std::sort(files.begin(), files.end());
  return files;
}

std::string CorpusCaseName(const ::testing::TestParamInfo<fs::path>& info) {
  std::string n = info.param.stem().string();
  for (char& ch : n) {
    if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
  }
  return n;
}

void ExpectRefusal(const net::Response& res, const std::string& expect, std::string* message) {
  boost::system::error_code ec;
  json::value status = json::parse(res.body, ec);
  ASSERT_FALSE(ec) << res.body;
  const json::value* msg_value =
      status.is_object() ? status.as_object().if_contains("message") : nullptr;
  ASSERT_TRUE(msg_value != nullptr && msg_value->is_string()) << res.body;
  std::string msg(msg_value->as_string());
  if (message != nullptr) *message = msg;
  EXPECT_GE(res.status, 400) << res.body;
  if (res.status >= 500) {
    EXPECT_EQ(msg.rfind("failed to create typed patch object", 0), 0u) << res.body;
  }
  EXPECT_EQ(msg.find("failed calling webhook"), std::string::npos) << msg;
  EXPECT_NE(msg.find(expect), std::string::npos) << "expected \"" << expect << "\" in:\n"
                                                 << msg.substr(0, 2000);
}

}  // namespace hyperslice::testenv
