// Collectives built from a Communicator's primitives for what the learner's ranks exchange
// besides gradients: rank 0 samples each training batch from the buffer and sends its bytes to
// the others (BroadcastBytes), and every rank says whether its step went well before anyone
// applies it (AgreeOk), so that the ranks fail together instead of one rank waiting forever in
// the next collective for a peer that gave up.
//
// Like every collective, each rank of the group calls these in the same order.
#ifndef FLYWHEEL_DIST_COLLECTIVES_H_
#define FLYWHEEL_DIST_COLLECTIVES_H_

#include <string>

#include "absl/status/status.h"
#include "flywheel/dist/communicator.h"

namespace flywheel::dist {

// Makes `bytes` on every rank a copy of `bytes` on rank `root`: the length first (an int64
// broadcast), then the payload as a uint8 tensor over the string's own buffer (no copy on the
// root; the others resize and receive in place).
absl::Status BroadcastBytes(Communicator& comm, std::string& bytes, int root);

// Every rank passes whether its part of the step succeeded; returns OK on every rank when all of
// them passed true, and on every rank kAborted naming the ranks that passed false otherwise
// (an all-reduce max of one failure flag per rank). A rank that passed false still reports its
// own error; this tells the others why to stop.
absl::Status AgreeOk(Communicator& comm, bool ok);

}  // namespace flywheel::dist

#endif  // FLYWHEEL_DIST_COLLECTIVES_H_
