#include "loader/hub_download.h"

#include <fcntl.h>
#include <openssl/evp.h>
#include <sys/file.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <memory>
#include <set>
#include <thread>

#include "core/check.h"
#include "core/json.h"
#include "loader/hub.h"
#include "loader/hub_http.h"

namespace miniinfer::hub {
namespace fs = std::filesystem;
namespace {

constexpr int kMaxAttempts = 5;  // per file; a lost connection resumes where it stopped

// The files MiniInfer reads; the safetensors shards are added from the listing or the index.
const char* const kWantedFiles[] = {"config.json",         "generation_config.json",
                                    "tokenizer.json",      "tokenizer_config.json",
                                    "chat_template.jinja", "model.safetensors.index.json"};

// An exclusive flock on {cache}/.locks/{repo}/{etag}.lock, as huggingface_hub's filelock takes
// it, so two downloaders never write one blob at once.
class FileLock {
  public:
    explicit FileLock(const fs::path& path) {
        fs::create_directories(path.parent_path());
        fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
        if (fd_ < 0) fail("{}: {}", path.string(), std::strerror(errno));
        while (::flock(fd_, LOCK_EX) != 0 && errno == EINTR) {
        }
    }
    ~FileLock() { ::close(fd_); }
    FileLock(const FileLock&) = delete;
    FileLock& operator=(const FileLock&) = delete;

  private:
    int fd_ = -1;
};

class Sha256 {
  public:
    Sha256() { reset(); }
    void reset() { EVP_DigestInit_ex(ctx_.get(), EVP_sha256(), nullptr); }
    void update(const char* data, size_t size) { EVP_DigestUpdate(ctx_.get(), data, size); }
    std::string hex() {
        unsigned char digest[EVP_MAX_MD_SIZE];
        unsigned int size = 0;
        EVP_DigestFinal_ex(ctx_.get(), digest, &size);
        std::string out;
        for (unsigned int i = 0; i < size; ++i) out += fmt::format("{:02x}", digest[i]);
        return out;
    }

  private:
    struct Free {
        void operator()(EVP_MD_CTX* c) const { EVP_MD_CTX_free(c); }
    };
    std::unique_ptr<EVP_MD_CTX, Free> ctx_{EVP_MD_CTX_new()};
};

// One line per file on a terminal, redrawn at most ten times a second; nothing otherwise.
class ProgressLine {
  public:
    ProgressLine(std::string name, int64_t total) : name_(std::move(name)), total_(total) {}
    void update(int64_t done, bool final = false) {
        if (!enabled_) return;
        const auto now = std::chrono::steady_clock::now();
        if (!final && now - last_ < std::chrono::milliseconds(100)) return;
        last_ = now;
        const double seconds = std::chrono::duration<double>(now - start_).count();
        const double rate = seconds > 0 ? double(done - first_) / seconds / 1e6 : 0;
        std::fprintf(stderr, "\rdownloading %s  %.1f/%.1f MB  %3d%%  %.1f MB/s   ", name_.c_str(),
                     double(done) / 1e6, double(total_) / 1e6,
                     total_ > 0 ? int(100 * done / total_) : 100, rate);
        if (final) std::fputc('\n', stderr);
        std::fflush(stderr);
    }
    void start(int64_t done) { first_ = done; }

  private:
    std::string name_;
    int64_t total_;
    int64_t first_ = 0;
    bool enabled_ = isatty(STDERR_FILENO) != 0;
    std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now(), last_{};
};

std::string unquote_etag(std::string etag) {
    if (etag.rfind("W/", 0) == 0) etag = etag.substr(2);
    if (etag.size() >= 2 && etag.front() == '"' && etag.back() == '"')
        etag = etag.substr(1, etag.size() - 2);
    return etag;
}

bool is_sha256(const std::string& s) {
    return s.size() == 64 && s.find_first_not_of("0123456789abcdef") == std::string::npos;
}

// Writes `text` to `path` through a temporary name and a rename.
void write_atomically(const fs::path& path, const std::string& text) {
    fs::create_directories(path.parent_path());
    const fs::path tmp = path.string() + ".tmp." + std::to_string(::getpid());
    {
        std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
        out << text;
        out.flush();
        if (!out) fail("writing {}: {}", tmp.string(), std::strerror(errno));
    }
    fs::rename(tmp, path);
}

// snapshots/{commit}/{filename} -> ../../blobs/{etag} (one more ../ per folder in filename),
// made under a temporary name and renamed over any old link.
void link_into_snapshot(const fs::path& snapshot, const std::string& filename,
                        const std::string& etag) {
    const fs::path link = snapshot / filename;
    fs::create_directories(link.parent_path());
    fs::path target = "../../blobs/" + etag;
    for (char c : filename)
        if (c == '/') target = ".." / target;
    const fs::path tmp = link.string() + ".tmp." + std::to_string(::getpid());
    std::error_code ec;
    fs::remove(tmp, ec);
    fs::create_symlink(target, tmp);
    fs::rename(tmp, link);
}

class Downloader {
  public:
    explicit Downloader(const DownloadRequest& r) : r_(r), http_(r.token) {}

    fs::path run() {
        const std::string api_url = fmt::format("{}/api/models/{}/revision/{}", r_.endpoint,
                                                r_.repo_id, HttpClient::escape(r_.revision));
        const HttpResult info = http_.get(api_url);
        if (!info.ok()) fail_response(info, api_url, "");
        Json json;
        try {
            json = Json::parse(info.body);
        } catch (const std::exception& e) {
            fail("{}: the hub's answer is not JSON ({})", api_url, e.what());
        }
        std::string commit = json.value("sha", "");
        std::set<std::string> listed;
        for (const Json& s : json.value("siblings", Json::array()))
            listed.insert(s.value("rfilename", ""));
        if (!listed.count("config.json"))
            fail("{}: revision '{}' has no config.json (not a transformers model?)", r_.repo_id,
                 r_.revision);
        if (commit.empty()) commit = fetch_file("main", "config.json", nullptr);
        const fs::path snapshot = r_.repo_dir / "snapshots" / commit;

        std::vector<std::string> files;
        for (const char* f : kWantedFiles)
            if (listed.count(f)) files.push_back(f);
        for (const std::string& f : files) fetch_if_missing(commit, f, snapshot);
        // With an index, the shards it names (a repo may hold other .safetensors too).
        std::set<std::string> shards;
        if (listed.count("model.safetensors.index.json")) {
            const Json index =
                Json::parse(read_text_file(snapshot / "model.safetensors.index.json"));
            for (const auto& [tensor, file] : index.at("weight_map").items())
                shards.insert(file.get<std::string>());
            for (const std::string& s : shards)
                if (!listed.count(s))
                    fail(
                        "{}: model.safetensors.index.json names {}, which revision '{}' does "
                        "not have",
                        r_.repo_id, s, r_.revision);
        } else {
            for (const std::string& f : listed)
                if (f.find('/') == std::string::npos && fs::path(f).extension() == ".safetensors")
                    shards.insert(f);
        }
        if (shards.empty())
            fail("{}: revision '{}' has no .safetensors checkpoint", r_.repo_id, r_.revision);
        for (const std::string& s : shards) fetch_if_missing(commit, s, snapshot);
        if (r_.revision != commit) write_atomically(r_.repo_dir / "refs" / r_.revision, commit);
        return snapshot;
    }

  private:
    void fetch_if_missing(const std::string& commit, const std::string& filename,
                          const fs::path& snapshot) {
        if (!fs::exists(snapshot / filename)) fetch_file(commit, filename, &snapshot);
    }

    std::string file_url(const std::string& revision, const std::string& filename) const {
        std::string path;
        size_t begin = 0;
        while (begin <= filename.size()) {
            size_t end = filename.find('/', begin);
            if (end == std::string::npos) end = filename.size();
            path += (begin ? "/" : "") + HttpClient::escape(filename.substr(begin, end - begin));
            begin = end + 1;
        }
        return fmt::format("{}/{}/resolve/{}/{}", r_.endpoint, r_.repo_id,
                           HttpClient::escape(revision), path);
    }

    // Fetches one file's blob (unless present) and links it into `snapshot` (when given).
    // Returns the commit the hub names for it.
    std::string fetch_file(const std::string& revision, const std::string& filename,
                           const fs::path* snapshot) {
        const std::string url = file_url(revision, filename);
        HttpResult head = http_.head(url);
        // The hub answers a renamed repo with a relative redirect to its new name.
        const std::string location = head.header("location");
        if (head.status >= 300 && head.status < 400 && head.header("x-linked-etag").empty() &&
            location.rfind("/", 0) == 0)
            head = http_.head(r_.endpoint + location);
        if (!head.transfer_error.empty() || head.status >= 400 || head.status < 200)
            fail_response(head, url, filename);
        std::string etag = unquote_etag(head.header("x-linked-etag"));
        if (etag.empty()) etag = unquote_etag(head.header("etag"));
        if (etag.empty()) fail("{}: the hub sent no ETag for {}", url, filename);
        std::string size_text = head.header("x-linked-size");
        if (size_text.empty() && head.status == 200) size_text = head.header("content-length");
        const int64_t size = size_text.empty() ? -1 : std::stoll(size_text);

        const fs::path blob = r_.repo_dir / "blobs" / etag;
        if (!fs::exists(blob)) {
            FileLock lock(r_.cache / ".locks" / repo_folder_name(r_.repo_id) / (etag + ".lock"));
            if (!fs::exists(blob)) fetch_blob(url, blob, etag, size, filename);
        }
        if (snapshot) link_into_snapshot(*snapshot, filename, etag);
        return head.header("x-repo-commit");
    }

    // Downloads into blobs/{etag}.incomplete (continuing what is there), checks the size and,
    // for an LFS file, the sha256, then renames it to blobs/{etag}.
    void fetch_blob(const std::string& url, const fs::path& blob, const std::string& etag,
                    int64_t size, const std::string& filename) {
        fs::create_directories(blob.parent_path());
        const fs::path part = blob.string() + ".incomplete";
        Sha256 sha;
        int64_t hashed = 0;  // bytes of `part` already fed to sha
        ProgressLine progress(filename, size);
        for (int attempt = 1;; ++attempt) {
            int64_t offset = fs::exists(part) ? int64_t(fs::file_size(part)) : 0;
            if (size >= 0 && offset > size) {
                fs::resize_file(part, 0);
                offset = 0;
            }
            if (hashed != offset) {  // a partial file from an earlier run: hash what it holds
                sha.reset();
                hash_file_prefix(part, offset, sha);
                hashed = offset;
            }
            if (size >= 0 && offset == size) break;
            check_free_space(blob.parent_path(), size - offset);
            std::unique_ptr<FILE, int (*)(FILE*)> out(std::fopen(part.c_str(), "ab"), std::fclose);
            if (!out) fail("{}: {}", part.string(), std::strerror(errno));
            int write_errno = 0;
            bool first = true;
            progress.start(offset);
            auto sink = [&](const char* data, size_t n, long status) {
                if (first && status == 200 && offset > 0) {  // the server ignored the Range
                    if (::ftruncate(fileno(out.get()), 0) != 0) write_errno = errno;
                    offset = hashed = 0;
                    sha.reset();
                }
                first = false;
                if (std::fwrite(data, 1, n, out.get()) != n) {
                    write_errno = errno ? errno : EIO;
                    return false;
                }
                sha.update(data, n);
                hashed += int64_t(n);
                return write_errno == 0;
            };
            const HttpResult r = http_.download(
                url, offset, sink, [&](int64_t received) { progress.update(offset + received); });
            if (std::fflush(out.get()) != 0 && !write_errno) write_errno = errno;
            if (write_errno)
                fail("writing {}: {}{}", part.string(), std::strerror(write_errno),
                     write_errno == ENOSPC ? " (free some space or point HF_HUB_CACHE elsewhere)"
                                           : "");
            if (r.ok()) {
                if (size < 0 || hashed >= size) break;
                if (attempt >= kMaxAttempts)
                    fail("{}: the download stopped at {} of {} bytes", url, hashed, size);
                continue;  // the server closed early without an error: resume
            }
            if (r.status == 416 && size < 0) break;  // already whole
            if (!r.transient || attempt >= kMaxAttempts) fail_response(r, url, filename);
            std::this_thread::sleep_for(std::chrono::milliseconds(250 * attempt));
        }
        const int64_t got = int64_t(fs::file_size(part));
        progress.update(got, /*final=*/true);
        if (size >= 0 && got != size) {
            fs::remove(part);
            fail("{}: downloaded {} bytes, the hub said {}; removed, try again", url, got, size);
        }
        if (is_sha256(etag)) {
            if (hashed != got) {
                sha.reset();
                hash_file_prefix(part, got, sha);
            }
            const std::string digest = sha.hex();
            if (digest != etag) {
                fs::remove(part);
                fail(
                    "{}: sha256 {} does not match the hub's {}; the corrupt download is "
                    "removed, try again",
                    url, digest, etag);
            }
        }
        fs::rename(part, blob);
    }

    static void hash_file_prefix(const fs::path& path, int64_t bytes, Sha256& sha) {
        std::ifstream in(path, std::ios::binary);
        std::vector<char> buf(1 << 20);
        while (bytes > 0 && in) {
            in.read(buf.data(), std::streamsize(std::min<int64_t>(bytes, int64_t(buf.size()))));
            sha.update(buf.data(), size_t(in.gcount()));
            bytes -= in.gcount();
        }
    }

    static void check_free_space(const fs::path& dir, int64_t needed) {
        struct statvfs st {};
        if (needed <= 0 || ::statvfs(dir.c_str(), &st) != 0) return;
        const auto free_bytes = int64_t(st.f_bavail) * int64_t(st.f_frsize);
        if (free_bytes < needed)
            fail(
                "not enough disk space in {}: {:.1f} MB needed, {:.1f} MB free (free some "
                "space or point HF_HUB_CACHE elsewhere)",
                dir.string(), double(needed) / 1e6, double(free_bytes) / 1e6);
    }

    // filename "" means the repository itself (the API call).
    [[noreturn]] void fail_response(const HttpResult& r, const std::string& url,
                                    const std::string& filename) const {
        const std::string what = filename.empty() ? r_.repo_id : r_.repo_id + ": " + filename;
        if (r.status == 0 || (!r.transfer_error.empty() && r.status < 300))
            fail("{}: cannot download from {}: {} (HF_HUB_OFFLINE=1 uses the cache only)", what,
                 r_.endpoint, r.transfer_error);
        const std::string code = r.header("x-error-code");
        const std::string token_hint = r_.token.empty()
                                           ? "set HF_TOKEN to a token that has access"
                                           : "the token in HF_TOKEN was refused or has no access";
        if (code == "RepositoryNotFound" || (r.status == 404 && filename.empty() && code.empty()))
            fail(
                "{}: repository not found on {} ({}); check the name (for a private repository, "
                "{})",
                r_.repo_id, r_.endpoint, r.status, token_hint);
        if (code == "RevisionNotFound")
            fail("{}: revision '{}' not found ({})", r_.repo_id, r_.revision, r.status);
        if (r.status == 401 || r.status == 403)
            fail(
                "{}: access denied ({}): the repository is gated or private; accept its terms "
                "on the hub and {}",
                what, r.status, token_hint);
        if (r.status == 404)
            fail("{}: file not found at revision '{}' ({})", what, r_.revision, url);
        fail("{}: HTTP {} from {}{}", what, r.status, url,
             r.transfer_error.empty() ? "" : " (" + r.transfer_error + ")");
    }

    const DownloadRequest& r_;
    HttpClient http_;
};

}  // namespace

fs::path download_snapshot(const DownloadRequest& request) {
    try {
        return Downloader(request).run();
    } catch (const fs::filesystem_error& e) {
        fail("{}: {}", request.repo_id, e.what());
    }
}

}  // namespace miniinfer::hub
