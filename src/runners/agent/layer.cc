// Applying an image layer with libarchive. OCI whiteouts are not a tar feature, so they are
// handled here: libarchive extracts files; deleting what a ".wh." entry names is ours.
#include <archive.h>
#include <archive_entry.h>

#include <filesystem>
#include <memory>
#include <string>

#include "src/runners/agent/image_store.h"

namespace hyperslice::runners::agent {
namespace fs = std::filesystem;
namespace {

struct ReadFree {
  void operator()(archive* a) const { archive_read_free(a); }
};
struct WriteFree {
  void operator()(archive* a) const { archive_write_free(a); }
};

// The entry's path made relative and free of "..": nullopt when it would escape the root.
std::optional<std::string> Clean(const std::string& raw) {
  fs::path p = fs::path(raw).lexically_normal();
  std::string s = p.relative_path().string();
  if (s.empty() || s == ".") return std::string();
  if (s.rfind("..", 0) == 0) return std::nullopt;
  while (!s.empty() && s.back() == '/') s.pop_back();
  return s;
}

}  // namespace

Status ApplyLayer(const std::string& layer_path, const std::string& rootfs) {
  std::unique_ptr<archive, ReadFree> in(archive_read_new());
  archive_read_support_filter_gzip(in.get());
  archive_read_support_filter_none(in.get());
  archive_read_support_format_tar(in.get());
  if (archive_read_open_filename(in.get(), layer_path.c_str(), 1 << 16) != ARCHIVE_OK) {
    return Error::Make(Error::Code::kInvalidArgument,
                       "layer " + layer_path + ": " + archive_error_string(in.get()));
  }
  std::unique_ptr<archive, WriteFree> out(archive_write_disk_new());
  archive_write_disk_set_options(
      out.get(), ARCHIVE_EXTRACT_TIME | ARCHIVE_EXTRACT_PERM | ARCHIVE_EXTRACT_OWNER |
                     ARCHIVE_EXTRACT_XATTR | ARCHIVE_EXTRACT_UNLINK |
                     ARCHIVE_EXTRACT_SECURE_NODOTDOT | ARCHIVE_EXTRACT_SECURE_SYMLINKS);
  archive_entry* entry = nullptr;
  int rc = ARCHIVE_OK;
  while ((rc = archive_read_next_header(in.get(), &entry)) == ARCHIVE_OK) {
    auto rel = Clean(archive_entry_pathname(entry));
    if (!rel) {
      return Error::Make(
          Error::Code::kInvalidArgument,
          "layer entry escapes the root: " + std::string(archive_entry_pathname(entry)));
    }
    if (rel->empty()) continue;
    fs::path rp(*rel);
    std::string name = rp.filename().string();
    std::error_code ec;
    if (name == ".wh..wh..opq") {
      fs::path dir = fs::path(rootfs) / rp.parent_path();
      if (fs::is_directory(dir, ec)) {
        for (const auto& child : fs::directory_iterator(dir, ec)) fs::remove_all(child.path(), ec);
      }
      continue;
    }
    if (name.rfind(".wh.", 0) == 0) {
      fs::remove_all(fs::path(rootfs) / rp.parent_path() / name.substr(4), ec);
      continue;
    }
    std::string full = rootfs + "/" + *rel;
    archive_entry_set_pathname(entry, full.c_str());
    if (const char* hl = archive_entry_hardlink(entry); hl != nullptr) {
      auto target = Clean(hl);
      if (!target || target->empty()) {
        return Error::Make(Error::Code::kInvalidArgument,
                           "layer hard link escapes the root: " + std::string(hl));
      }
      std::string full_target = rootfs + "/" + *target;
      archive_entry_set_hardlink(entry, full_target.c_str());
    }
    // A later layer may replace a directory with a file or the other way round.
    if (fs::is_directory(fs::symlink_status(full, ec)) &&
        archive_entry_filetype(entry) != AE_IFDIR) {
      fs::remove_all(full, ec);
    }
    if (archive_write_header(out.get(), entry) != ARCHIVE_OK) {
      return Error::Make(Error::Code::kInternal,
                         "layer entry " + *rel + ": " + archive_error_string(out.get()));
    }
    if (archive_entry_size(entry) > 0) {
      const void* buf = nullptr;
      size_t size = 0;
      la_int64_t offset = 0;
      while (archive_read_data_block(in.get(), &buf, &size, &offset) == ARCHIVE_OK) {
        if (archive_write_data_block(out.get(), buf, size, offset) != ARCHIVE_OK) {
          return Error::Make(Error::Code::kInternal,
                             "layer entry " + *rel + ": " + archive_error_string(out.get()));
        }
      }
    }
    archive_write_finish_entry(out.get());
  }
  if (rc != ARCHIVE_EOF) {
    return Error::Make(Error::Code::kInvalidArgument,
                       "layer " + layer_path + ": " + archive_error_string(in.get()));
  }
  return OkStatus();
}

}  // namespace hyperslice::runners::agent
