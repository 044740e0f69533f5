// CRC32C (Castagnoli) with the SSE4.2 instruction, put in place of librocksdb's software CRC.
//
// Debian's librocksdb is a portable build: its crc32c::Extend is table-driven and never uses
// the SSE4.2 crc32 instruction, which at 64 KiB trajectories made checksumming the WAL the
// largest single cost of a durable insert. librocksdb calls crc32c::Extend through its PLT,
// so the definition in crc32c.cc (an exported symbol of the executable) takes the place of
// the library's for every WAL record, SST block and recovery read: same polynomial, same
// results, so files stay readable by any RocksDB. A CPU without SSE4.2 gets a table-driven
// fallback. Linking this file is what switches it on; durable_store.cc references
// Crc32cImplementation() so that every binary with a durable store has it.
#ifndef FLYWHEEL_BUFFER_CRC32C_H_
#define FLYWHEEL_BUFFER_CRC32C_H_

#include <cstddef>
#include <cstdint>

namespace flywheel {

// Extends `crc` (a finished CRC32C, 0 to start) over data[0, n), as rocksdb::crc32c::Extend.
uint32_t Crc32cExtend(uint32_t crc, const char* data, size_t n);

// The table-driven fallback for CPUs without SSE4.2 (exposed for its test).
uint32_t Crc32cExtendTable(uint32_t crc, const char* data, size_t n);

// "sse4.2" or "table": which implementation Crc32cExtend (and so RocksDB) uses here.
const char* Crc32cImplementation();

}  // namespace flywheel

#endif  // FLYWHEEL_BUFFER_CRC32C_H_
