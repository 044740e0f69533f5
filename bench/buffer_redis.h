// The Redis Streams peer of `flywheel bench buffer`.
#ifndef FLYWHEEL_BENCH_BUFFER_REDIS_H_
#define FLYWHEEL_BENCH_BUFFER_REDIS_H_

#include <string>

#include "absl/status/statusor.h"
#include "bench/buffer_peer.h"

namespace flywheel::bench {

// Empty when the peer can run here; otherwise why it is skipped (and how to install it).
std::string RedisSkipReason();

// Starts redis-server on 127.0.0.1 in `dir` (appendonly yes; appendfsync `fsync`: "everysec",
// Redis's default, acknowledges writes up to a second before they are on disk; "always" syncs
// before it answers, as flywheel's durable buffer does), runs `load` through one stream of
// serialized trajectories `base` (stamped per item), and stops it.
absl::StatusOr<CaseResult> RunRedisStreams(const std::string& dir, const std::string& base,
                                           int64_t item_bytes, const BufferLoad& load,
                                           const std::string& fsync);

}  // namespace flywheel::bench

#endif  // FLYWHEEL_BENCH_BUFFER_REDIS_H_
