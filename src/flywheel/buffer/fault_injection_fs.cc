#include "flywheel/buffer/fault_injection_fs.h"

#include <algorithm>
#include <atomic>
#include <filesystem>
#include <system_error>
#include <utility>

#include "flywheel/core/strings.h"

namespace flywheel {
namespace {

namespace fs = std::filesystem;

// One spelling per file and directory: RocksDB names a directory with or without a trailing '/'.
std::string Normal(const std::string& name) {
  fs::path p = fs::path(name).lexically_normal();
  if (p.has_parent_path() && !p.has_filename()) p = p.parent_path();
  return p.string();
}

std::string DirectoryOf(const std::string& name) { return fs::path(name).parent_path().string(); }

class TrackedFile : public rocksdb::FSWritableFileOwnerWrapper {
 public:
  TrackedFile(std::unique_ptr<rocksdb::FSWritableFile> file, std::string name, uint64_t size,
              FaultInjectionFileSystem* fs)
      : FSWritableFileOwnerWrapper(std::move(file)), name_(std::move(name)), size_(size), fs_(fs) {}

  rocksdb::IOStatus Append(const rocksdb::Slice& data, const rocksdb::IOOptions& options,
                           rocksdb::IODebugContext* dbg) override {
    return Wrote(data.size(), size_ + data.size(),
                 [&] { return FSWritableFileOwnerWrapper::Append(data, options, dbg); });
  }
  rocksdb::IOStatus Append(const rocksdb::Slice& data, const rocksdb::IOOptions& options,
                           const rocksdb::DataVerificationInfo& info,
                           rocksdb::IODebugContext* dbg) override {
    return Wrote(data.size(), size_ + data.size(),
                 [&] { return FSWritableFileOwnerWrapper::Append(data, options, info, dbg); });
  }
  rocksdb::IOStatus PositionedAppend(const rocksdb::Slice& data, uint64_t offset,
                                     const rocksdb::IOOptions& options,
                                     rocksdb::IODebugContext* dbg) override {
    return Wrote(data.size(), std::max<uint64_t>(size_, offset + data.size()), [&] {
      return FSWritableFileOwnerWrapper::PositionedAppend(data, offset, options, dbg);
    });
  }
  rocksdb::IOStatus PositionedAppend(const rocksdb::Slice& data, uint64_t offset,
                                     const rocksdb::IOOptions& options,
                                     const rocksdb::DataVerificationInfo& info,
                                     rocksdb::IODebugContext* dbg) override {
    return Wrote(data.size(), std::max<uint64_t>(size_, offset + data.size()), [&] {
      return FSWritableFileOwnerWrapper::PositionedAppend(data, offset, options, info, dbg);
    });
  }
  rocksdb::IOStatus Truncate(uint64_t size, const rocksdb::IOOptions& options,
                             rocksdb::IODebugContext* dbg) override {
    absl::ReaderMutexLock io(&fs_->io_mutex());
    rocksdb::IOStatus s = fs_->CheckWrite(0);
    if (s.ok()) s = FSWritableFileOwnerWrapper::Truncate(size, options, dbg);
    if (s.ok()) {
      size_ = size;
      fs_->Truncated(name_, size);
    }
    return s;
  }
  rocksdb::IOStatus Flush(const rocksdb::IOOptions& options,
                          rocksdb::IODebugContext* dbg) override {
    absl::ReaderMutexLock io(&fs_->io_mutex());
    rocksdb::IOStatus s = fs_->CheckWrite(0);
    return s.ok() ? FSWritableFileOwnerWrapper::Flush(options, dbg) : s;
  }
  rocksdb::IOStatus Sync(const rocksdb::IOOptions& options, rocksdb::IODebugContext* dbg) override {
    return Synced([&] { return FSWritableFileOwnerWrapper::Sync(options, dbg); });
  }
  rocksdb::IOStatus Fsync(const rocksdb::IOOptions& options,
                          rocksdb::IODebugContext* dbg) override {
    return Synced([&] { return FSWritableFileOwnerWrapper::Fsync(options, dbg); });
  }
  // A range sync only starts write-back; it promises nothing, so it moves no synced mark.
  rocksdb::IOStatus RangeSync(uint64_t offset, uint64_t bytes, const rocksdb::IOOptions& options,
                              rocksdb::IODebugContext* dbg) override {
    absl::ReaderMutexLock io(&fs_->io_mutex());
    rocksdb::IOStatus s = fs_->CheckWrite(0);
    return s.ok() ? FSWritableFileOwnerWrapper::RangeSync(offset, bytes, options, dbg) : s;
  }

 private:
  template <typename F>
  rocksdb::IOStatus Wrote(uint64_t bytes, uint64_t end, F&& write) {
    absl::ReaderMutexLock io(&fs_->io_mutex());
    rocksdb::IOStatus s = fs_->CheckWrite(bytes);
    if (s.ok()) s = write();
    if (s.ok()) {
      size_ = end;
      fs_->Appended(name_, end);
    }
    return s;
  }
  template <typename F>
  rocksdb::IOStatus Synced(F&& sync) {
    absl::ReaderMutexLock io(&fs_->io_mutex());
    // A sync covers what was written before it began; an append that returns while it runs
    // may or may not be on the disk, so it counts as not.
    const uint64_t covered = size_.load();
    rocksdb::IOStatus s = fs_->CheckSync();
    if (s.ok()) s = sync();
    if (s.ok()) fs_->Synced(name_, covered);
    return s;
  }

  const std::string name_;
  std::atomic<uint64_t> size_;  // RocksDB may append to a file while another thread syncs it
  FaultInjectionFileSystem* const fs_;
};

class TrackedDirectory : public rocksdb::FSDirectoryWrapper {
 public:
  TrackedDirectory(std::unique_ptr<rocksdb::FSDirectory> dir, std::string name,
                   FaultInjectionFileSystem* fs)
      : FSDirectoryWrapper(std::move(dir)), name_(std::move(name)), fs_(fs) {}

  rocksdb::IOStatus Fsync(const rocksdb::IOOptions& options,
                          rocksdb::IODebugContext* dbg) override {
    absl::ReaderMutexLock io(&fs_->io_mutex());
    rocksdb::IOStatus s = fs_->CheckSync();
    if (s.ok()) s = FSDirectoryWrapper::Fsync(options, dbg);
    return s.ok() ? fs_->SyncDirectory(name_) : s;
  }
  rocksdb::IOStatus FsyncWithDirOptions(const rocksdb::IOOptions& options,
                                        rocksdb::IODebugContext* dbg,
                                        const rocksdb::DirFsyncOptions& dir_options) override {
    absl::ReaderMutexLock io(&fs_->io_mutex());
    rocksdb::IOStatus s = fs_->CheckSync();
    if (s.ok()) s = FSDirectoryWrapper::FsyncWithDirOptions(options, dbg, dir_options);
    return s.ok() ? fs_->SyncDirectory(name_) : s;
  }

 private:
  const std::string name_;
  FaultInjectionFileSystem* const fs_;
};

}  // namespace

FaultInjectionFileSystem::FaultInjectionFileSystem(const std::shared_ptr<rocksdb::FileSystem>& base)
    : FileSystemWrapper(base) {}

void FaultInjectionFileSystem::CutPower() {
  absl::WriterMutexLock io(&io_mu_);
  absl::MutexLock lock(&mu_);
  power_off_ = true;
}

void FaultInjectionFileSystem::FreezeIo() ABSL_NO_THREAD_SAFETY_ANALYSIS {
  io_mu_.Lock();  // never released: the process ends with its machine
}

void FaultInjectionFileSystem::RestorePower() {
  absl::MutexLock lock(&mu_);
  power_off_ = false;
}

void FaultInjectionFileSystem::SetDiskFull(bool full) {
  absl::MutexLock lock(&mu_);
  disk_full_ = full;
}

void FaultInjectionFileSystem::SetSyncFails(bool fails) {
  absl::MutexLock lock(&mu_);
  sync_fails_ = fails;
}

int64_t FaultInjectionFileSystem::syncs() const {
  absl::MutexLock lock(&mu_);
  return syncs_;
}

int64_t FaultInjectionFileSystem::files_dropped() const {
  absl::MutexLock lock(&mu_);
  return files_dropped_;
}

int64_t FaultInjectionFileSystem::bytes_dropped() const {
  absl::MutexLock lock(&mu_);
  return bytes_dropped_;
}

absl::Status FaultInjectionFileSystem::DropUnsyncedData() {
  absl::MutexLock lock(&mu_);
  // A lost directory entry takes the whole tree under it (parents sort before their children).
  for (const auto& [name, in_directory] : directories_) {
    std::error_code ec;
    if (in_directory || !fs::exists(name, ec)) continue;
    const uintmax_t removed = fs::remove_all(name, ec);
    if (ec) return absl::InternalError(StrCat("cannot remove ", name, ": ", ec.message()));
    files_dropped_ += static_cast<int64_t>(removed);
  }
  directories_.clear();
  for (const auto& [name, state] : files_) {
    std::error_code ec;
    if (!fs::exists(DirectoryOf(name), ec)) continue;  // went with its directory
    if (!state.in_directory) {
      if (fs::remove(name, ec)) ++files_dropped_;
      if (ec) return absl::InternalError(StrCat("cannot remove ", name, ": ", ec.message()));
      continue;
    }
    const uintmax_t size = fs::file_size(name, ec);
    if (ec) continue;  // deleted since, by a write that reached the disk
    if (size > state.synced) {
      fs::resize_file(name, state.synced, ec);
      if (ec) return absl::InternalError(StrCat("cannot truncate ", name, ": ", ec.message()));
      bytes_dropped_ += static_cast<int64_t>(size - state.synced);
    }
  }
  files_.clear();  // what is left is on the disk for good
  return absl::OkStatus();
}

rocksdb::IOStatus FaultInjectionFileSystem::CheckWrite(uint64_t bytes) const {
  absl::MutexLock lock(&mu_);
  if (power_off_) return rocksdb::IOStatus::IOError("power cut (fault injection)");
  if (disk_full_ && bytes > 0) {
    rocksdb::IOStatus s = rocksdb::IOStatus::NoSpace("no space left on device (fault injection)");
    return s;
  }
  return rocksdb::IOStatus::OK();
}

rocksdb::IOStatus FaultInjectionFileSystem::CheckSync() const {
  absl::MutexLock lock(&mu_);
  if (power_off_) return rocksdb::IOStatus::IOError("power cut (fault injection)");
  if (sync_fails_) return rocksdb::IOStatus::IOError("fsync failed: EIO (fault injection)");
  return rocksdb::IOStatus::OK();
}

void FaultInjectionFileSystem::Appended(const std::string& name, uint64_t end) {
  absl::MutexLock lock(&mu_);
  files_[Normal(name)].size = end;
}

void FaultInjectionFileSystem::Truncated(const std::string& name, uint64_t size) {
  absl::MutexLock lock(&mu_);
  FileState& f = files_[Normal(name)];
  f.size = size;
  f.synced = std::min(f.synced, size);
}

void FaultInjectionFileSystem::Synced(const std::string& name, uint64_t covered) {
  absl::MutexLock lock(&mu_);
  FileState& f = files_[Normal(name)];
  f.synced = std::max(f.synced, std::min(covered, f.size));
  ++syncs_;
}

rocksdb::IOStatus FaultInjectionFileSystem::SyncDirectory(const std::string& dir) {
  const std::string d = Normal(dir);
  absl::MutexLock lock(&mu_);
  for (auto& [name, state] : files_) {
    if (DirectoryOf(name) == d) state.in_directory = true;
  }
  for (auto& [name, in_directory] : directories_) {
    if (DirectoryOf(name) == d) in_directory = true;
  }
  return rocksdb::IOStatus::OK();
}

rocksdb::IOStatus FaultInjectionFileSystem::DirectoryCreated(const std::string& name,
                                                             rocksdb::IOStatus s, bool existed) {
  if (!s.ok() || existed) return s;
  absl::MutexLock lock(&mu_);
  directories_[Normal(name)] = false;
  return s;
}

rocksdb::IOStatus FaultInjectionFileSystem::Created(const std::string& name, rocksdb::IOStatus s,
                                                    uint64_t size, bool existed) {
  if (!s.ok()) return s;
  absl::MutexLock lock(&mu_);
  auto [it, inserted] = files_.try_emplace(Normal(name));
  FileState& f = it->second;
  if (inserted) f.in_directory = existed;  // an entry made before we watched is on the disk
  f.size = size;
  f.synced = inserted && existed ? size : std::min(f.synced, size);
  return s;
}

rocksdb::IOStatus FaultInjectionFileSystem::NewWritableFile(
    const std::string& name, const rocksdb::FileOptions& options,
    std::unique_ptr<rocksdb::FSWritableFile>* result, rocksdb::IODebugContext* dbg) {
  absl::ReaderMutexLock io(&io_mu_);
  rocksdb::IOStatus s = CheckWrite(0);
  if (!s.ok()) return s;
  std::error_code ec;
  const bool existed = fs::exists(name, ec);
  std::unique_ptr<rocksdb::FSWritableFile> file;
  s = Created(name, target()->NewWritableFile(name, options, &file, dbg), 0, existed);
  if (s.ok()) *result = std::make_unique<TrackedFile>(std::move(file), name, 0, this);
  return s;
}

rocksdb::IOStatus FaultInjectionFileSystem::ReopenWritableFile(
    const std::string& name, const rocksdb::FileOptions& options,
    std::unique_ptr<rocksdb::FSWritableFile>* result, rocksdb::IODebugContext* dbg) {
  absl::ReaderMutexLock io(&io_mu_);
  rocksdb::IOStatus s = CheckWrite(0);
  if (!s.ok()) return s;
  std::error_code ec;
  const bool existed = fs::exists(name, ec);
  const uint64_t size = existed ? fs::file_size(name, ec) : 0;
  std::unique_ptr<rocksdb::FSWritableFile> file;
  s = Created(name, target()->ReopenWritableFile(name, options, &file, dbg), size, existed);
  if (s.ok()) *result = std::make_unique<TrackedFile>(std::move(file), name, size, this);
  return s;
}

rocksdb::IOStatus FaultInjectionFileSystem::ReuseWritableFile(
    const std::string& name, const std::string& old_name, const rocksdb::FileOptions& options,
    std::unique_ptr<rocksdb::FSWritableFile>* result, rocksdb::IODebugContext* dbg) {
  absl::ReaderMutexLock io(&io_mu_);
  rocksdb::IOStatus s = CheckWrite(0);
  if (!s.ok()) return s;
  std::unique_ptr<rocksdb::FSWritableFile> file;
  s = target()->ReuseWritableFile(name, old_name, options, &file, dbg);
  if (!s.ok()) return s;
  {
    absl::MutexLock lock(&mu_);
    files_.erase(Normal(old_name));
  }
  s = Created(name, s, 0, /*existed=*/false);  // a new name: not in the directory until synced
  if (s.ok()) *result = std::make_unique<TrackedFile>(std::move(file), name, 0, this);
  return s;
}

// Random-access writes are not tracked (the buffer's database does not make them); refused
// after a power cut all the same.
rocksdb::IOStatus FaultInjectionFileSystem::NewRandomRWFile(
    const std::string& name, const rocksdb::FileOptions& options,
    std::unique_ptr<rocksdb::FSRandomRWFile>* result, rocksdb::IODebugContext* dbg) {
  absl::ReaderMutexLock io(&io_mu_);
  rocksdb::IOStatus s = CheckWrite(0);
  return s.ok() ? target()->NewRandomRWFile(name, options, result, dbg) : s;
}

rocksdb::IOStatus FaultInjectionFileSystem::NewDirectory(
    const std::string& name, const rocksdb::IOOptions& options,
    std::unique_ptr<rocksdb::FSDirectory>* result, rocksdb::IODebugContext* dbg) {
  std::unique_ptr<rocksdb::FSDirectory> dir;
  rocksdb::IOStatus s = target()->NewDirectory(name, options, &dir, dbg);
  if (s.ok()) *result = std::make_unique<TrackedDirectory>(std::move(dir), name, this);
  return s;
}

void FaultInjectionFileSystem::NewName(const std::string& from, const std::string& to,
                                       bool keep_from) {
  std::error_code ec;
  if (fs::is_directory(to, ec)) {
    // A directory renamed: its entry needs its new parent synced; what it holds moves with it.
    const std::string old_prefix = Normal(from) + "/";
    const std::string new_dir = Normal(to);
    auto moved = [&](const std::string& name) {
      return new_dir + "/" + name.substr(old_prefix.size());
    };
    absl::MutexLock lock(&mu_);
    std::map<std::string, FileState> files;
    for (auto& [name, state] : files_) {
      files[name.rfind(old_prefix, 0) == 0 ? moved(name) : name] = state;
    }
    files_ = std::move(files);
    std::map<std::string, bool> directories;
    for (auto& [name, in_directory] : directories_) {
      if (name == Normal(from)) continue;
      directories[name.rfind(old_prefix, 0) == 0 ? moved(name) : name] = in_directory;
    }
    directories[new_dir] = false;
    directories_ = std::move(directories);
    return;
  }
  const uint64_t size = fs::file_size(to, ec);
  absl::MutexLock lock(&mu_);
  FileState state{size, size, false};  // a file we did not watch: on the disk as it is
  if (auto it = files_.find(Normal(from)); it != files_.end()) {
    state = it->second;
    if (!keep_from) files_.erase(it);
  }
  state.in_directory = false;  // the new name needs its directory synced
  files_[Normal(to)] = state;
}

rocksdb::IOStatus FaultInjectionFileSystem::RenameFile(const std::string& from,
                                                       const std::string& to,
                                                       const rocksdb::IOOptions& options,
                                                       rocksdb::IODebugContext* dbg) {
  absl::ReaderMutexLock io(&io_mu_);
  rocksdb::IOStatus s = CheckWrite(0);
  if (s.ok()) s = target()->RenameFile(from, to, options, dbg);
  if (s.ok()) NewName(from, to, /*keep_from=*/false);
  return s;
}

rocksdb::IOStatus FaultInjectionFileSystem::CreateDir(const std::string& name,
                                                      const rocksdb::IOOptions& options,
                                                      rocksdb::IODebugContext* dbg) {
  absl::ReaderMutexLock io(&io_mu_);
  rocksdb::IOStatus s = CheckWrite(0);
  if (!s.ok()) return s;
  return DirectoryCreated(name, target()->CreateDir(name, options, dbg), /*existed=*/false);
}

rocksdb::IOStatus FaultInjectionFileSystem::DeleteDir(const std::string& name,
                                                      const rocksdb::IOOptions& options,
                                                      rocksdb::IODebugContext* dbg) {
  absl::ReaderMutexLock io(&io_mu_);
  rocksdb::IOStatus s = CheckWrite(0);
  if (s.ok()) s = target()->DeleteDir(name, options, dbg);
  if (s.ok()) {
    absl::MutexLock lock(&mu_);
    directories_.erase(Normal(name));
  }
  return s;
}

rocksdb::IOStatus FaultInjectionFileSystem::CreateDirIfMissing(const std::string& name,
                                                               const rocksdb::IOOptions& options,
                                                               rocksdb::IODebugContext* dbg) {
  absl::ReaderMutexLock io(&io_mu_);
  rocksdb::IOStatus s = CheckWrite(0);
  if (!s.ok()) return s;
  std::error_code ec;
  const bool existed = fs::exists(name, ec);
  return DirectoryCreated(name, target()->CreateDirIfMissing(name, options, dbg), existed);
}

rocksdb::IOStatus FaultInjectionFileSystem::LinkFile(const std::string& from, const std::string& to,
                                                     const rocksdb::IOOptions& options,
                                                     rocksdb::IODebugContext* dbg) {
  absl::ReaderMutexLock io(&io_mu_);
  rocksdb::IOStatus s = CheckWrite(0);
  if (s.ok()) s = target()->LinkFile(from, to, options, dbg);
  if (s.ok()) NewName(from, to, /*keep_from=*/true);
  return s;
}

rocksdb::IOStatus FaultInjectionFileSystem::DeleteFile(const std::string& name,
                                                       const rocksdb::IOOptions& options,
                                                       rocksdb::IODebugContext* dbg) {
  absl::ReaderMutexLock io(&io_mu_);
  rocksdb::IOStatus s = CheckWrite(0);
  if (s.ok()) s = target()->DeleteFile(name, options, dbg);
  if (s.ok()) {
    absl::MutexLock lock(&mu_);
    files_.erase(Normal(name));
  }
  return s;
}

}  // namespace flywheel
