// The bad-input corpora (test/corpus/<kind>/*.yaml), applied as a user would: each file starts
// with "# Case: <what>" and "# Expect: <substring of the refusal>" or "# Expect: admitted", and
// optionally "# Warn: <substring of an admission warning>". The loader and the checks of a refusal
// that every corpus test makes, one instead of a copy per corpus.
#pragma once

#include <filesystem>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "src/net/http.h"

namespace hyperslice::testenv {

struct CorpusCase {
  std::string file;    // file name
  std::string text;    // the YAML as committed
  std::string what;    // "# Case:"
  std::string expect;  // "# Expect:"
  std::string warn;    // "# Warn:" ("" when none)
  std::string kind;    // the object's kind, metadata.name and metadata.namespace ("" when absent)
  std::string name;
  std::string ns;
};

CorpusCase LoadCorpusCase(const std::filesystem::path& path);

// The .yaml files of `dir`, sorted.
std::vector<std::filesystem::path> CorpusFiles(const std::filesystem::path& dir);

// A test name from the file name (its stem, every character but letters and digits as '_').
std::string CorpusCaseName(const ::testing::TestParamInfo<std::filesystem::path>& info);

// The checks on the apiserver's answer to a case it must refuse: a metav1.Status whose message
// contains `expect`, with a 4xx, or the 500 kube-apiserver answers a value of the wrong type in an
// apply patch with (its server-side-apply type check, "failed to create typed patch object"); a
// failed webhook call (crash, timeout, bad answer) is never a refusal of the input. `message`, when
// given, receives the refusal's message. Fatal failures (no Status, no message) end the calling
// test when it is called under ASSERT_NO_FATAL_FAILURE.
void ExpectRefusal(const net::Response& res, const std::string& expect,
                   std::string* message = nullptr);

}  // namespace hyperslice::testenv
