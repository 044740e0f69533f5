// Knobs of the trajectory buffer: the [buffer] section of a job config and the options of
// `flywheel serve buffer`. Validate() refuses settings that could block producers or the
// learner forever (Reverb's SampleToInsertRatio check plus the table-size constraints).
#ifndef FLYWHEEL_BUFFER_BUFFER_OPTIONS_H_
#define FLYWHEEL_BUFFER_BUFFER_OPTIONS_H_

#include <algorithm>
#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "flywheel/core/config.h"
#include "flywheel/core/strings.h"

namespace flywheel {

// Which item a sample picks (selectors/).
enum class SelectorKind { kFifo, kUniform, kPrioritized, kRolePriority };
inline constexpr config::ChoiceName<SelectorKind> kSelectorKindNames[] = {
    {"fifo", SelectorKind::kFifo},
    {"uniform", SelectorKind::kUniform},
    {"prioritized", SelectorKind::kPrioritized},
    {"role_priority", SelectorKind::kRolePriority}};

// queue: samples_per_insert = 1, every item handed out once in FIFO order (max_times_sampled
// = 1), inserts block when max_size items wait. ratio: Reverb's SampleToInsertRatio.
// What happens when an insert finds the table full. block: the producer waits (backpressure,
// nothing is dropped). fifo: the oldest item is evicted and counted (replay-style tables).
enum class RemoverKind { kBlock, kFifo };
inline constexpr config::ChoiceName<RemoverKind> kRemoverKindNames[] = {
    {"block", RemoverKind::kBlock}, {"fifo", RemoverKind::kFifo}};

enum class RateLimiterKind { kQueue, kRatio };
inline constexpr config::ChoiceName<RateLimiterKind> kRateLimiterKindNames[] = {
    {"queue", RateLimiterKind::kQueue}, {"ratio", RateLimiterKind::kRatio}};

struct BufferOptions {
  int64_t max_size = 100000;  // items held; a full table blocks producers
  RateLimiterKind rate_limiter = RateLimiterKind::kQueue;
  double samples_per_insert = 1.0;
  int64_t min_size_to_sample = 1;
  double error_buffer = 100.0;  // allowed drift of samples - samples_per_insert * inserts
  SelectorKind selector = SelectorKind::kFifo;
  int64_t max_times_sampled = 1;  // an item is removed after this many samples; 0 = never
  RemoverKind remover = RemoverKind::kBlock;
  double priority_exponent = 1.0;   // prioritized: P(i) ∝ priority_i ^ exponent
  int64_t max_staleness = -1;       // drop at sample time when learner_version - min_version > this
  int64_t group_size = 1;           // G trajectories per group id, released together
  int64_t min_group_size = 1;       // a late group is released with at least this many members
  double straggler_timeout_s = 60;  // after the first member arrived
  bool durable = false;            // acknowledge inserts only once they are in RocksDB's synced WAL
  std::string path = "buffer.db";  // RocksDB directory for durable mode
  // Trajectory ids remembered after they left the buffer (trained, dropped, handed out), so
  // that a retried insert of one is acknowledged without a second copy; ids held are always
  // known. 0 = inserts are not idempotent (the in-process buffer of `flywheel train`, which no
  // one retries, keeps no ids). See id_ledger.h.
  int64_t remember_ids = 1 << 16;
  std::string address = "127.0.0.1:7300";  // `flywheel serve buffer` listen address
  int64_t max_message_bytes = 64 << 20;    // largest gRPC message accepted
  // The server's other bounds (rpc/server_limits.h; docs/reliability.md, "Bounds").
  int64_t max_concurrent_calls = 1024;
  int64_t max_streams_per_connection = 100;
  int64_t memory_quota_bytes = int64_t{1} << 30;
  double idle_stream_timeout_s = 60;
  // TLS of `flywheel serve buffer` (its --tls-cert, --tls-key, --tls-client-ca win over these).
  std::string tls_cert;
  std::string tls_key;
  std::string tls_client_ca;

  template <typename V>
  void VisitFields(V& v) {
    v.Field("max_size", max_size, "items held; a full table blocks producers");
    v.Choice("rate_limiter", rate_limiter, kRateLimiterKindNames,
             "queue = each item sampled once; ratio = samples_per_insert with error_buffer");
    v.Field("samples_per_insert", samples_per_insert, "ratio: target samples per insert");
    v.Field("min_size_to_sample", min_size_to_sample, "no sample before this many items");
    v.Field("error_buffer", error_buffer, "ratio: allowed drift from samples_per_insert");
    v.Choice("selector", selector, kSelectorKindNames, "which item a sample picks");
    v.Field("max_times_sampled", max_times_sampled,
            "remove an item after this many samples; 0 = never");
    v.Choice("remover", remover, kRemoverKindNames,
             "full table: block = producers wait; fifo = evict the oldest (counted)");
    v.Field("priority_exponent", priority_exponent, "prioritized: P(i) ∝ priority^exponent");
    v.Field("max_staleness", max_staleness,
            "drop items with learner_version - min_version above this; -1 = keep all");
    v.Field("group_size", group_size, "trajectories per group id released together (G)");
    v.Field("min_group_size", min_group_size, "release a late group with at least this many");
    v.Field("straggler_timeout_s", straggler_timeout_s, "seconds after a group's first member");
    v.Field("durable", durable, "ack inserts only after RocksDB's synced WAL has them");
    v.Field("path", path, "RocksDB directory for durable mode");
    v.Field("remember_ids", remember_ids,
            "ids of consumed trajectories remembered so that a retried insert is not stored "
            "twice; 0 = no idempotent inserts");
    v.Field("address", address, "serve address (127.0.0.1 by default: not exposed)");
    v.Field("max_message_bytes", max_message_bytes, "largest gRPC message accepted");
    v.Field("max_concurrent_calls", max_concurrent_calls,
            "calls served at once; more are refused with UNAVAILABLE (clients retry)");
    v.Field("max_streams_per_connection", max_streams_per_connection,
            "streams of one client connection at once; more wait on the client");
    v.Field("memory_quota_bytes", memory_quota_bytes,
            "gRPC's buffers, all connections (>= 4 x max_message_bytes)");
    v.Field("idle_stream_timeout_s", idle_stream_timeout_s,
            "cancel a stream that waits on its client (sends nothing, reads nothing) this long");
    v.Field("tls_cert", tls_cert, "serve with TLS: PEM certificate (chain) file");
    v.Field("tls_key", tls_key, "serve with TLS: PEM private key file of tls_cert");
    v.Field("tls_client_ca", tls_client_ca,
            "mutual TLS: clients must present a certificate signed by this PEM CA");
  }

  // The (samples_per_insert, min_diff, max_diff) Reverb's RateLimiter is built from.
  double EffectiveSamplesPerInsert() const {
    return rate_limiter == RateLimiterKind::kQueue ? 1.0 : samples_per_insert;
  }

  absl::Status Validate() const {
    auto error = [](auto... parts) { return absl::InvalidArgumentError(StrCat(parts...)); };
    if (max_size <= 0) return error("buffer.max_size must be > 0 (got ", max_size, ")");
    if (min_size_to_sample < 1) {
      return error("buffer.min_size_to_sample must be >= 1 (got ", min_size_to_sample, ")");
    }
    if (min_size_to_sample > max_size) {
      return error("buffer.min_size_to_sample (", min_size_to_sample, ") exceeds buffer.max_size (",
                   max_size, "): the table could never hold enough items to sample, a deadlock");
    }
    if (rate_limiter == RateLimiterKind::kRatio) {
      if (!(samples_per_insert > 0)) {
        return error("buffer.samples_per_insert must be > 0 (got ", samples_per_insert, ")");
      }
      // Reverb: a window narrower than one insert's worth of samples (or one sample) can block
      // both sides at once.
      if (error_buffer < std::max(1.0, samples_per_insert)) {
        return error(
            "buffer.error_buffer (", error_buffer,
            ") must be >= max(1, buffer.samples_per_insert) = ", std::max(1.0, samples_per_insert),
            ": a smaller window can block inserts and samples at the same time");
      }
      // With a blocking remover only samples free space. Items leave after max_times_sampled
      // samples, so unless samples_per_insert >= max_times_sampled they pile up until the
      // table is full while the limiter holds samples back: both sides block forever.
      if (remover == RemoverKind::kBlock &&
          (max_times_sampled == 0 || samples_per_insert < static_cast<double>(max_times_sampled))) {
        return error("buffer.remover = \"block\" with buffer.max_times_sampled = ",
                     max_times_sampled, " and buffer.samples_per_insert = ", samples_per_insert,
                     " can deadlock once the table is full (items are not sampled away fast "
                     "enough); use remover = \"fifo\" or samples_per_insert >= "
                     "max_times_sampled >= 1");
      }
    }
    if (max_times_sampled < 0) return error("buffer.max_times_sampled must be >= 0");
    if (!(priority_exponent >= 0)) return error("buffer.priority_exponent must be >= 0");
    if (max_staleness < -1) return error("buffer.max_staleness must be >= -1 (-1 = off)");
    if (group_size < 1) return error("buffer.group_size must be >= 1");
    if (min_group_size < 1 || min_group_size > group_size) {
      return error("buffer.min_group_size (", min_group_size,
                   ") must be in [1, group_size = ", group_size, "]");
    }
    if (!(straggler_timeout_s > 0)) return error("buffer.straggler_timeout_s must be > 0");
    if (durable && path.empty()) return error("buffer.path must be set when buffer.durable");
    if (remember_ids < 0) return error("buffer.remember_ids must be >= 0 (got ", remember_ids, ")");
    if (address.empty()) return error("buffer.address must not be empty");
    if (max_message_bytes < 1024) return error("buffer.max_message_bytes must be >= 1024");
    return absl::OkStatus();
  }
};

}  // namespace flywheel

#endif  // FLYWHEEL_BUFFER_BUFFER_OPTIONS_H_
