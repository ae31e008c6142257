// `hyperslice webhook`'s command line: gke-tpu-env-injector's flags and variables (seed 001) with
// their meaning, and empty values that mean "none" without taking the next argument.
#include "src/webhook/flags.h"

#include <algorithm>
#include <cstdlib>
#include <optional>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <CLI/CLI.hpp>

namespace hyperslice::webhook {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::Not;

// Sets (or unsets, with nullopt) an environment variable for the scope of a test.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, std::optional<std::string> value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    if (value) {
      setenv(name, value->c_str(), 1);
    } else {
      unsetenv(name);
    }
  }
  ~ScopedEnv() {
    if (old_) {
      setenv(name_, old_->c_str(), 1);
    } else {
      unsetenv(name_);
    }
  }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  const char* name_;
  std::optional<std::string> old_;
};

struct Parsed {
  Flags flags;
  Status status = OkStatus();  // FinishFlags
  std::string parse_error;     // CLI11's, "" when it parsed
  std::vector<std::string> warnings;
};

// Parses `hyperslice webhook <args...>` as main.cc does (a subcommand of the binary's app).
Parsed Parse(std::vector<std::string> args) {
  Parsed out;
  CLI::App app;
  CLI::App* sub = app.add_subcommand("webhook");
  AddFlags(*sub, out.flags);
  args.insert(args.begin(), "webhook");
  std::reverse(args.begin(), args.end());  // CLI11 takes the arguments in reverse order
  try {
    app.parse(args);
  } catch (const CLI::ParseError& e) {
    out.parse_error = std::string(e.get_name()) + ": " + e.what();
    return out;
  }
  out.status = FinishFlags(*sub, out.flags, &out.warnings);
  return out;
}

class WebhookFlags : public ::testing::Test {
 protected:
  // No variable from the machine running the tests may leak in.
  ScopedEnv verbose_{"GTEI_VERBOSE", std::nullopt};
  ScopedEnv cert_{"GTEI_TLS_CERT_FILE", std::nullopt};
  ScopedEnv key_{"GTEI_TLS_KEY_FILE", std::nullopt};
  ScopedEnv ns_{"POD_NAMESPACE", std::nullopt};
};

TEST_F(WebhookFlags, UpstreamDefaults) {
  Parsed p = Parse({});
  ASSERT_EQ(p.parse_error, "");
  ASSERT_TRUE(p.status.ok()) << p.status.error().message;
  EXPECT_EQ(p.flags.tls_cert_file, "/etc/tls/tls.crt");
  EXPECT_EQ(p.flags.tls_key_file, "/etc/tls/tls.key");
  EXPECT_FALSE(p.flags.verbose);
  EXPECT_EQ(p.flags.mutating_config, "hyperslice-tpu-env");
  EXPECT_EQ(p.flags.validating_config, "hyperslice-tpunodegroups");
}

TEST_F(WebhookFlags, EmptyConfigurationNameMeansNoneAndDoesNotTakeTheNextArgument) {
  Parsed p = Parse({"--validating-webhook-configuration=", "--port=9443",
                    "--mutating-webhook-configuration=", "--self-signed"});
  ASSERT_EQ(p.parse_error, "");
  ASSERT_TRUE(p.status.ok()) << p.status.error().message;
  EXPECT_EQ(p.flags.validating_config, "");
  EXPECT_EQ(p.flags.mutating_config, "");
  EXPECT_EQ(p.flags.port, 9443);
  EXPECT_TRUE(p.flags.self_signed);

  // Last on the line, and the space-separated form still takes its value.
  p = Parse({"--mutating-webhook-configuration", "mine", "--validating-webhook-configuration="});
  ASSERT_EQ(p.parse_error, "");
  EXPECT_EQ(p.flags.mutating_config, "mine");
  EXPECT_EQ(p.flags.validating_config, "");
}

TEST_F(WebhookFlags, EmptyValueWhereOneIsNeededIsRefusedByName) {
  Parsed p = Parse({"--tls-cert-file=", "--tls-key-file=/k"});
  ASSERT_EQ(p.parse_error, "");
  EXPECT_EQ(p.flags.tls_key_file, "/k");
  ASSERT_FALSE(p.status.ok());
  EXPECT_THAT(p.status.error().message, HasSubstr("--tls-cert-file needs a value"));

  p = Parse({"--port=", "--self-signed"});
  ASSERT_EQ(p.parse_error, "");
  ASSERT_FALSE(p.status.ok());
  EXPECT_THAT(p.status.error().message, HasSubstr("--port must be from 1 to 65535"));
  EXPECT_TRUE(p.flags.self_signed);
}

TEST_F(WebhookFlags, VerboseFlagAsUpstreamParsesIt) {
  EXPECT_TRUE(Parse({"--verbose"}).flags.verbose);
  EXPECT_TRUE(Parse({"--verbose=true"}).flags.verbose);
  EXPECT_TRUE(Parse({"--verbose=T"}).flags.verbose);
  EXPECT_FALSE(Parse({"--verbose=false"}).flags.verbose);
  EXPECT_FALSE(Parse({"--verbose=0"}).flags.verbose);
  EXPECT_THAT(Parse({"--verbose=maybe"}).parse_error, Not(IsEmpty()));
}

TEST_F(WebhookFlags, VerboseFromTheEnvironmentAsViperReadsIt) {
  for (const char* yes : {"1", "t", "T", "TRUE", "true", "True"}) {
    ScopedEnv env("GTEI_VERBOSE", yes);
    Parsed p = Parse({});
    EXPECT_TRUE(p.flags.verbose) << yes;
    EXPECT_THAT(p.warnings, IsEmpty());
  }
  for (const char* no : {"0", "f", "F", "FALSE", "false", "False", ""}) {
    ScopedEnv env("GTEI_VERBOSE", no);
    Parsed p = Parse({});
    EXPECT_FALSE(p.flags.verbose) << no;
    EXPECT_THAT(p.warnings, IsEmpty());
  }
  {
    // Go's ParseBool refuses it and viper.GetBool then answers false: so do we, and say so.
    ScopedEnv env("GTEI_VERBOSE", "yes");
    Parsed p = Parse({});
    ASSERT_TRUE(p.status.ok());
    EXPECT_FALSE(p.flags.verbose);
    ASSERT_EQ(p.warnings.size(), 1u);
    EXPECT_THAT(p.warnings[0], HasSubstr("GTEI_VERBOSE=\"yes\""));
  }
  {
    // The command line wins over the variable, both ways.
    ScopedEnv env("GTEI_VERBOSE", "true");
    EXPECT_FALSE(Parse({"--verbose=false"}).flags.verbose);
  }
  {
    ScopedEnv env("GTEI_VERBOSE", "false");
    EXPECT_TRUE(Parse({"--verbose"}).flags.verbose);
  }
}

TEST_F(WebhookFlags, TlsFilesFromTheEnvironmentUnlessOnTheCommandLine) {
  ScopedEnv cert("GTEI_TLS_CERT_FILE", "/env/tls.crt");
  ScopedEnv key("GTEI_TLS_KEY_FILE", "/env/tls.key");
  Parsed p = Parse({});
  EXPECT_EQ(p.flags.tls_cert_file, "/env/tls.crt");
  EXPECT_EQ(p.flags.tls_key_file, "/env/tls.key");
  p = Parse({"--tls-cert-file=/flag/tls.crt"});
  EXPECT_EQ(p.flags.tls_cert_file, "/flag/tls.crt");
  EXPECT_EQ(p.flags.tls_key_file, "/env/tls.key");
  // An empty variable is unset (viper's default), not an empty path.
  ScopedEnv empty("GTEI_TLS_CERT_FILE", "");
  EXPECT_EQ(Parse({}).flags.tls_cert_file, "/etc/tls/tls.crt");
}

TEST_F(WebhookFlags, ExtraSansRepeatAndSplitAtCommas) {
  Parsed p = Parse({"--self-signed-extra-sans=127.0.0.1,::1", "--self-signed-extra-sans",
                    "webhook.local", "--self-signed-extra-sans=", "--port=1443"});
  ASSERT_EQ(p.parse_error, "");
  EXPECT_THAT(p.flags.ExtraSans(), ElementsAre("127.0.0.1", "::1", "webhook.local"));
  EXPECT_EQ(p.flags.port, 1443);
}

TEST_F(WebhookFlags, ChoicesAreChecked) {
  Parsed p = Parse({"--owner-unreadable=sometimes"});
  ASSERT_FALSE(p.status.ok());
  EXPECT_THAT(p.status.error().message, HasSubstr("--owner-unreadable must be deny or allow"));
  p = Parse({"--owner-cache=redis"});
  ASSERT_FALSE(p.status.ok());
  EXPECT_THAT(p.status.error().message, HasSubstr("--owner-cache must be informer or none"));
  p = Parse({"--io-threads=0"});
  ASSERT_FALSE(p.status.ok());
  EXPECT_THAT(p.status.error().message, HasSubstr("--io-threads must be at least 1"));
}

}  // namespace
}  // namespace hyperslice::webhook
