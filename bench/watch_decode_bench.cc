// Watch-stream decode throughput (MB/s) on a recorded 1 MiB stream.
//
// Data: bench/data/watch_stream_1mib.jsonl, a real watch body recorded from kube-apiserver
// (ConfigMap creates/updates/deletes; see
// test/integration/kube_client/record_watch_stream_test.cc). The decoder gets it in 4 KiB chunks,
// as a socket would deliver it, and every event is popped (and so fully materialised as a
// boost::json::object). "bytes_per_second" is the figure; the events counter gives events/s.
// Baseline: boost::json::parse of each line, which needs the framing done for it and so bounds what
// incremental framing costs.
//   ninja -C build watch_decode_bench && build/bench/watch_decode_bench
#include <cstdio>
#include <fstream>
#include <iterator>
#include <string>

#include <benchmark/benchmark.h>
#include <boost/json/parse.hpp>

#include "src/kube/internal/watch_decoder.h"

namespace {

const std::string& Stream() {
  static const std::string data = [] {
    std::string path = std::string(HS_BENCH_DATA_DIR) + "/watch_stream_1mib.jsonl";
    std::ifstream f(path, std::ios::binary);
    if (!f) {
      std::fprintf(stderr, "cannot read %s\n", path.c_str());
      std::exit(1);
    }
    return std::string((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  }();
  return data;
}

void DecodeInChunks(benchmark::State& state) {
  const std::string& data = Stream();
  const size_t chunk = static_cast<size_t>(state.range(0));
  uint64_t events = 0;
  for (auto _ : state) {
    hyperslice::kube::WatchDecoder d;
    for (size_t pos = 0; pos < data.size(); pos += chunk) {
      auto st = d.Feed(std::string_view(data).substr(pos, chunk));
      if (!st.ok()) {
        state.SkipWithError(st.error().message.c_str());
        return;
      }
      while (auto ev = d.Pop()) {
        benchmark::DoNotOptimize(ev->object);
        ++events;
      }
    }
    if (!d.Finish().ok()) state.SkipWithError("stream ended mid-object");
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * data.size()));
  state.counters["events"] =
      benchmark::Counter(static_cast<double>(events), benchmark::Counter::kIsRate);
  state.counters["stream_bytes"] = static_cast<double>(data.size());
}
BENCHMARK(DecodeInChunks)->Arg(4096)->Arg(64)->Arg(65536)->Unit(benchmark::kMillisecond);

void BaselineParsePerLine(benchmark::State& state) {
  const std::string& data = Stream();
  uint64_t events = 0;
  for (auto _ : state) {
    size_t pos = 0;
    while (pos < data.size()) {
      size_t nl = data.find('\n', pos);
      if (nl == std::string::npos) nl = data.size();
      auto v = boost::json::parse(std::string_view(data).substr(pos, nl - pos));
      benchmark::DoNotOptimize(v);
      ++events;
      pos = nl + 1;
    }
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * data.size()));
  state.counters["events"] =
      benchmark::Counter(static_cast<double>(events), benchmark::Counter::kIsRate);
}
BENCHMARK(BaselineParsePerLine)->Unit(benchmark::kMillisecond);

}  // namespace

BENCHMARK_MAIN();
