// A rocksdb::FileSystem for storage-fault tests: power cuts, a full disk and failing fsync.
//
// A SIGKILL cannot prove durability: the killed process's writes that were never synced survive
// in the page cache, so a store that forgot an fsync passes a kill -9 test. This file system
// remembers, for every file written through it, how many bytes were synced, and whether the file
// was created since its directory was last synced. A power cut is then simulated as LevelDB's
// FaultInjectionTestEnv does it (DropUnsyncedFileData, DeleteFilesCreatedAfterLastDirSync):
//
//   CutPower()          from now on every write, sync, create, rename and delete fails (the
//                       machine is off); returns once no operation is in flight
//   DropUnsyncedData()  what the disk holds after the cut: each file truncated to its last
//                       synced length, each file created (or renamed into place) since its
//                       directory's last fsync removed
//   RestorePower()      the machine is back; reopen the database on the same file system
//   FreezeIo()          instead of CutPower, for a process that ends with its machine: every
//                       later operation waits forever rather than failing (RocksDB's debug
//                       builds abort on a write after a failed one, which a process whose
//                       machine is off would never live to see); returns once none is in flight
//
// Faults that leave the machine running: SetDiskFull (appends fail with ENOSPC, as on a full
// disk) and SetSyncFails (fsync fails with EIO). A rename that was not followed by an fsync of
// its directory loses the new name; the old one is not brought back (RocksDB syncs the directory
// after each rename it depends on, CURRENT's). Directories made through it (CreateDir) are
// entries like files: one made or renamed since its parent's last fsync is removed with all it
// holds (the checkpoint writer, learner/checkpoint.h, renames a directory into place). Files
// that existed before they were first opened for writing through this object count as synced.
// Deletions are not undone. Thread-safe.
#ifndef FLYWHEEL_BUFFER_FAULT_INJECTION_FS_H_
#define FLYWHEEL_BUFFER_FAULT_INJECTION_FS_H_

#include <rocksdb/file_system.h>

#include <cstdint>
#include <map>
#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"

namespace flywheel {

class FaultInjectionFileSystem : public rocksdb::FileSystemWrapper {
 public:
  explicit FaultInjectionFileSystem(
      const std::shared_ptr<rocksdb::FileSystem>& base = rocksdb::FileSystem::Default());

  static const char* kClassName() { return "FlywheelFaultInjectionFileSystem"; }
  const char* Name() const override { return kClassName(); }

  void CutPower();
  absl::Status DropUnsyncedData();
  void RestorePower();
  void FreezeIo();
  void SetDiskFull(bool full);
  void SetSyncFails(bool fails);

  int64_t syncs() const;          // file syncs that reached the disk
  int64_t files_dropped() const;  // removed by DropUnsyncedData
  int64_t bytes_dropped() const;  // truncated away by DropUnsyncedData

  // Held (shared) by every operation from its check to its end, so that a power cut, which
  // takes it exclusively, falls between two operations, never inside one.
  absl::Mutex& io_mutex() const ABSL_LOCK_RETURNED(io_mu_) { return io_mu_; }

  // What a file written through this file system can do; called by its files.
  rocksdb::IOStatus CheckWrite(uint64_t bytes) const;
  rocksdb::IOStatus CheckSync() const;
  void Appended(const std::string& name, uint64_t end);
  void Truncated(const std::string& name, uint64_t size);
  void Synced(const std::string& name, uint64_t covered);  // the first `covered` bytes

  rocksdb::IOStatus NewWritableFile(const std::string& name, const rocksdb::FileOptions& options,
                                    std::unique_ptr<rocksdb::FSWritableFile>* result,
                                    rocksdb::IODebugContext* dbg) override;
  rocksdb::IOStatus ReopenWritableFile(const std::string& name, const rocksdb::FileOptions& options,
                                       std::unique_ptr<rocksdb::FSWritableFile>* result,
                                       rocksdb::IODebugContext* dbg) override;
  rocksdb::IOStatus ReuseWritableFile(const std::string& name, const std::string& old_name,
                                      const rocksdb::FileOptions& options,
                                      std::unique_ptr<rocksdb::FSWritableFile>* result,
                                      rocksdb::IODebugContext* dbg) override;
  rocksdb::IOStatus NewRandomRWFile(const std::string& name, const rocksdb::FileOptions& options,
                                    std::unique_ptr<rocksdb::FSRandomRWFile>* result,
                                    rocksdb::IODebugContext* dbg) override;
  rocksdb::IOStatus NewDirectory(const std::string& name, const rocksdb::IOOptions& options,
                                 std::unique_ptr<rocksdb::FSDirectory>* result,
                                 rocksdb::IODebugContext* dbg) override;
  rocksdb::IOStatus RenameFile(const std::string& from, const std::string& to,
                               const rocksdb::IOOptions& options,
                               rocksdb::IODebugContext* dbg) override;
  rocksdb::IOStatus LinkFile(const std::string& from, const std::string& to,
                             const rocksdb::IOOptions& options,
                             rocksdb::IODebugContext* dbg) override;
  rocksdb::IOStatus DeleteFile(const std::string& name, const rocksdb::IOOptions& options,
                               rocksdb::IODebugContext* dbg) override;
  rocksdb::IOStatus CreateDir(const std::string& name, const rocksdb::IOOptions& options,
                              rocksdb::IODebugContext* dbg) override;
  rocksdb::IOStatus DeleteDir(const std::string& name, const rocksdb::IOOptions& options,
                              rocksdb::IODebugContext* dbg) override;
  rocksdb::IOStatus CreateDirIfMissing(const std::string& name, const rocksdb::IOOptions& options,
                                       rocksdb::IODebugContext* dbg) override;

  // Every file of `dir` created since the directory's last fsync is now in it for good.
  rocksdb::IOStatus SyncDirectory(const std::string& dir);

 private:
  struct FileState {
    uint64_t size = 0;
    uint64_t synced = 0;
    bool in_directory = false;  // its directory entry survives a power cut
  };

  // `to` names the file `from` names (a rename, or a link when `keep_from`).
  void NewName(const std::string& from, const std::string& to, bool keep_from);
  rocksdb::IOStatus Created(const std::string& name, rocksdb::IOStatus s, uint64_t size,
                            bool existed);
  rocksdb::IOStatus DirectoryCreated(const std::string& name, rocksdb::IOStatus s, bool existed);

  mutable absl::Mutex io_mu_;
  mutable absl::Mutex mu_;
  bool power_off_ ABSL_GUARDED_BY(mu_) = false;
  bool disk_full_ ABSL_GUARDED_BY(mu_) = false;
  bool sync_fails_ ABSL_GUARDED_BY(mu_) = false;
  std::map<std::string, FileState> files_ ABSL_GUARDED_BY(mu_);
  // Directories made through this object; true once their entry survives a power cut.
  std::map<std::string, bool> directories_ ABSL_GUARDED_BY(mu_);
  int64_t syncs_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t files_dropped_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t bytes_dropped_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace flywheel

#endif  // FLYWHEEL_BUFFER_FAULT_INJECTION_FS_H_
