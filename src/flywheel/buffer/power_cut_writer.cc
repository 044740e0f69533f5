// The process whose machine loses its power, for power_cut_test: three threads insert into a
// durable store on a FaultInjectionFileSystem and print each acknowledged insert ("ack FIRST N")
// once Commit returned; at a random moment (from SEED) after `cut_after` acknowledged commits
// the power goes off: every file operation stops where it is (none fails: the process does not
// live to see its machine off), the disk keeps only what was synced, and the process ends at
// once ("cut BYTES_DROPPED FILES_DROPPED").
//
//   power_cut_writer PATH CUT_AFTER SEED SKIP_SYNC(0|1)
#include <rocksdb/env.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "flywheel/buffer/durable_store.h"
#include "flywheel/buffer/fault_injection_fs.h"
#include "flywheel/core/strings.h"

namespace flywheel {
namespace {

// One write(2) per line: lines of several threads never interleave on the pipe.
void Say(const std::string& line) {
  const std::string out = line + "\n";
  if (::write(STDOUT_FILENO, out.data(), out.size()) != static_cast<ssize_t>(out.size())) {
    std::_Exit(3);
  }
}

int Main(int argc, char** argv) {
  if (argc != 5) {
    std::fprintf(stderr, "usage: power_cut_writer PATH CUT_AFTER SEED SKIP_SYNC\n");
    return 2;
  }
  const std::string path = argv[1];
  const int64_t cut_after = std::atoll(argv[2]);
  const uint64_t seed = std::strtoull(argv[3], nullptr, 10);
  auto fs = std::make_shared<FaultInjectionFileSystem>();
  std::unique_ptr<rocksdb::Env> env = rocksdb::NewCompositeEnv(fs);
  auto store = DurableStore::Open(path, env.get());
  if (!store.ok()) {
    std::fprintf(stderr, "%s\n", store.status().ToString().c_str());
    return 1;
  }
  if (std::string(argv[4]) == "1") (*store)->SkipSyncForTesting();
  std::atomic<int64_t> commits{0};
  std::vector<std::thread> producers;
  for (uint64_t p = 0; p < 3; ++p) {
    producers.emplace_back([&, p] {
      std::mt19937_64 rng(seed * 3 + p);
      uint64_t next = (p + 1) << 32;
      while (true) {
        const uint64_t n = 1 + rng() % 4;
        DurableStore::Write w;
        for (uint64_t k = next; k < next + n; ++k) {
          w.puts.emplace_back(k, std::make_shared<const std::string>(
                                     StrCat("trajectory-", k, std::string(k % 97, 'x'))));
        }
        const absl::Status s = (*store)->Commit(w);
        if (!s.ok()) {  // file operations never fail, before the cut or after it
          std::fprintf(stderr, "commit failed before the power cut: %s\n", s.ToString().c_str());
          std::_Exit(1);
        }
        Say(StrCat("ack ", next, " ", n));
        next += n;
        ++commits;
      }
    });
  }
  // The cut lands at a random moment after the cut_after-th acknowledgement: between any two
  // of the file system's operations, with appends and syncs of other batches in flight.
  std::mt19937_64 rng(seed);
  const auto delay = std::chrono::microseconds(rng() % 2000);
  while (commits < cut_after) std::this_thread::sleep_for(std::chrono::microseconds(50));
  std::this_thread::sleep_for(delay);
  fs->FreezeIo();
  if (absl::Status dropped = fs->DropUnsyncedData(); !dropped.ok()) {
    std::fprintf(stderr, "%s\n", dropped.ToString().c_str());
    std::_Exit(1);
  }
  Say(StrCat("cut ", fs->bytes_dropped(), " ", fs->files_dropped()));
  std::_Exit(0);  // the producers are not joined: the machine is off
  return 1;       // not reached: the cut ends the process
}

}  // namespace
}  // namespace flywheel

int main(int argc, char** argv) { return flywheel::Main(argc, argv); }
