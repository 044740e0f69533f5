// The NATS JetStream peer of `flywheel bench buffer`.
#ifndef FLYWHEEL_BENCH_BUFFER_NATS_H_
#define FLYWHEEL_BENCH_BUFFER_NATS_H_

#include <string>

#include "absl/status/statusor.h"
#include "bench/buffer_peer.h"

namespace flywheel::bench {

// Empty when the peer can run here; otherwise why it is skipped (and how to install it).
std::string NatsSkipReason();

// Starts nats-server with JetStream on 127.0.0.1 (file storage in `dir`), runs `load` through a
// work-queue stream of serialized trajectories `base` (stamped per item), and stops it.
absl::StatusOr<CaseResult> RunNatsJetStream(const std::string& dir, const std::string& base,
                                            int64_t item_bytes, const BufferLoad& load);

}  // namespace flywheel::bench

#endif  // FLYWHEEL_BENCH_BUFFER_NATS_H_
