// The Vast.ai simulator's wire behaviour on its own, over raw HTTP: the search query language
// (every operator, order, limit, pricing type), its refusals, the instance list endpoints and the
// catalogs vast-cli fetches.
#include <set>

#include "test/integration/gpu_vast/fixture.h"

namespace hyperslice::gpu::vast_testing {
namespace {

std::vector<int64_t> Ids(const net::Response& r) {
  std::vector<int64_t> ids;
  boost::system::error_code ec;
  auto v = json::parse(r.body, ec);
  EXPECT_FALSE(ec) << r.body;
  if (ec || !v.is_object() || !v.as_object().contains("offers")) return ids;
  for (const auto& o : v.at("offers").as_array()) ids.push_back(o.at("id").as_int64());
  return ids;
}

std::set<int64_t> Set(const std::vector<int64_t>& v) { return {v.begin(), v.end()}; }

TEST_F(VastSimTest, SearchOperators) {
  auto search = [&](const std::string& q) { return Ids(Api("POST", "/api/v0/bundles/", q, "")); };
  EXPECT_EQ(Set(search(R"({"gpu_name":{"neq":"RTX 4090"},"num_gpus":{"gt":4}})")),
            (std::set<int64_t>{18423091, 18424288}));
  EXPECT_EQ(Set(search(R"({"dph_total":{"lte":0.35},"gpu_name":{"in":["RTX 4090","RTX 3090"]}})")),
            (std::set<int64_t>{18420311, 18422040}));
  EXPECT_EQ(Set(search(R"({"gpu_ram":{"gte":40000},"geolocation":{"notin":["US"]}})")),
            (std::set<int64_t>{18423006, 18424288}));
  EXPECT_EQ(Set(search(R"({"cpu_cores_effective":{"lt":12}})")), (std::set<int64_t>{18422040}));
  // GPU names as openapi.yaml's examples spell them, and its "ondemand".
  EXPECT_EQ(Set(search(R"({"gpu_name":{"in":["RTX_3090"]},"type":"ondemand"})")),
            (std::set<int64_t>{18422040, 18422118}));
  EXPECT_EQ(Set(search(R"({"geolocation":{"eq":"Germany, DE"}})")),
            (std::set<int64_t>{18421502, 18422118}));
  // Order and limit.
  EXPECT_EQ(search(R"({"order":[["dph_total","desc"]],"limit":2})"),
            (std::vector<int64_t>{18424288, 18423091}));
  EXPECT_EQ(search(R"({"gpu_name":{"eq":"RTX 4090"},"order":[["dph_total","asc"]]})"),
            (std::vector<int64_t>{18420311, 18421502, 18420377}));
  // type bid prices at the minimum bid.
  auto bid = json::parse(
      Api("POST", "/api/v0/bundles/", R"({"id":{"eq":18420311},"type":"bid"})", "").body);
  EXPECT_DOUBLE_EQ(bid.at("offers").at(0).at("dph_total").as_double(), 0.18);
  // The GET form takes the same query in ?q=.
  auto get = Api("GET", "/api/v0/bundles/?q=" + net::UrlEncode(R"({"num_gpus":{"eq":8}})"));
  EXPECT_EQ(Set(Ids(get)), (std::set<int64_t>{18423091, 18424288}));
}

TEST_F(VastSimTest, SearchRefusals) {
  auto refused = [&](const std::string& q, const std::string& msg) {
    auto r = Api("POST", "/api/v0/bundles/", q, "");
    EXPECT_EQ(r.status, 400) << q;
    auto v = json::parse(r.body);
    EXPECT_EQ(v.at("error").as_string(), "invalid_request");
    EXPECT_NE(std::string(v.at("msg").as_string()).find(msg), std::string::npos) << r.body;
  };
  refused("{not json", "Invalid json body");
  refused("[1,2]", "must be dict of conditions");
  refused(R"({"colour":{"eq":"red"}})", "unknown field colour");
  refused(R"({"num_gpus":{"about":2}})", "unknown operator about");
  refused(R"({"num_gpus":{"in":2}})", "takes a list");
  refused(R"({"num_gpus":2})", "must be dict of conditions");
  refused(R"({"limit":-1})", "limit must be a positive integer");
  refused(R"({"type":"cheap"})", "type must be");
  refused(R"({"order":[["colour","asc"]]})", "cannot order by colour");
  refused(R"({"order":[["dph_total"]]})", "order must be a list of [field, direction]");
  // A bad key on search: 404 auth_error (openapi.yaml searchOffers).
  auto bad_key = Api("POST", "/api/v0/bundles/", "{}", "not-a-key");
  EXPECT_EQ(bad_key.status, 404);
  EXPECT_EQ(json::parse(bad_key.body).at("error").as_string(), "auth_error");
}

TEST_F(VastSimTest, InstanceListsAndCatalogs) {
  for (const char* ask : {"18420311", "18422040"}) {
    auto r = Api("PUT", std::string("/api/v0/asks/") + ask + "/",
                 R"({"client_id":"me","image":"alpine:3.20","label":"l-)" + std::string(ask) +
                     R"(","disk":10})");
    ASSERT_EQ(r.status, 200) << r.body;
  }
  auto v1 = json::parse(Api("GET", "/api/v1/instances/?limit=1").body);
  EXPECT_EQ(v1.at("instances").as_array().size(), 1u);
  EXPECT_EQ(v1.at("total_instances").as_int64(), 2);
  ASSERT_TRUE(v1.at("next_token").is_string());
  auto next = json::parse(Api("GET", "/api/v1/instances/?limit=1&after_token=" +
                                         std::string(v1.at("next_token").as_string()))
                              .body);
  EXPECT_EQ(next.at("instances").as_array().size(), 1u);
  EXPECT_TRUE(next.at("next_token").is_null());
  auto filtered = json::parse(Api("GET", "/api/v1/instances/?select_filters=" +
                                             net::UrlEncode(R"({"label":{"in":["l-18422040"]}})") +
                                             "&select_cols=" + net::UrlEncode(R"(["id","label"])"))
                                  .body);
  ASSERT_EQ(filtered.at("instances").as_array().size(), 1u);
  EXPECT_EQ(filtered.at("instances").at(0).as_object().size(), 2u);
  // Refusals as openapi.yaml documents them; limits out of range are clamped.
  auto computed = Api(
      "GET", "/api/v1/instances/?select_filters=" + net::UrlEncode(R"({"dph_total":{"lt":1}})"));
  EXPECT_EQ(computed.status, 400);
  EXPECT_EQ(json::parse(computed.body),
            json::parse(R"({"error":"invalid_request","msg":"Error in query parameters: )"
                        R"(dph_total is not a valid search key"})"));
  EXPECT_EQ(json::parse(Api("GET", "/api/v1/instances/?after_token=bm9wZQ==").body)
                .at("error")
                .as_string(),
            "invalid_token");
  EXPECT_EQ(
      json::parse(Api("GET", "/api/v1/instances/?limit=0").body).at("instances").as_array().size(),
      2u);
  EXPECT_EQ(v1.at("label_counts"), json::parse(R"({"l-18420311":1,"l-18422040":1})"));
  auto v0 = json::parse(Api("GET", "/api/v0/instances/").body);
  EXPECT_EQ(v0.at("instances_found").as_int64(), 2);
  // Another account sees none of them.
  sim_->market().SetApiKey("other-key", "other-account");
  auto other = json::parse(Api("GET", "/api/v1/instances/", "", "other-key").body);
  EXPECT_TRUE(other.at("instances").as_array().empty());
  // The user blob never echoes the key; the catalogs need no key.
  auto user = Api("GET", "/api/v0/users/current");
  EXPECT_EQ(user.status, 200);
  EXPECT_EQ(user.body.find(kKey), std::string::npos);
  auto names = json::parse(Api("GET", "/api/v0/gpu_names/unique/", "", "").body);
  EXPECT_EQ(names.at("gpu_names").as_array().size(), 4u);
}

}  // namespace
}  // namespace hyperslice::gpu::vast_testing
