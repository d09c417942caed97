// The few HTTP requests the hub client makes, through libcurl. Internal to loader/hub.cpp.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>

namespace miniinfer::hub {

struct HttpResult {
    long status = 0;   // of the last response (after redirects); 0: no response at all
    std::string body;  // text requests, and the body of an error response to a download
    // Header values by lower-case name; the first response that carries a name wins, so the
    // hub's own answer (X-Repo-Commit, X-Linked-Etag) is kept across its redirect to a CDN.
    std::map<std::string, std::string> headers;
    std::string transfer_error;  // curl's message when the transfer failed or was cut short
    bool transient = false;      // the failure is worth retrying (connection lost, timeout)

    bool ok() const { return transfer_error.empty() && status >= 200 && status < 300; }
    std::string header(const std::string& lower_name) const;  // "" when absent
};

class HttpClient {
  public:
    // token: sent as "Authorization: Bearer" to the host of each request's URL only (curl
    // drops custom Authorization headers on a redirect to another host).
    explicit HttpClient(std::string token);

    // GET, following redirects; the body is kept.
    HttpResult get(const std::string& url) const;
    // HEAD, not following redirects: the hub's own headers for a file.
    HttpResult head(const std::string& url) const;
    // GET from byte `offset` (a Range request when > 0), following redirects. A 2xx body goes
    // to `sink(data, size, status)` (status tells a 206 continuation from a 200 restart); a
    // false return aborts the transfer. `progress(received)` is called as bytes arrive.
    HttpResult download(const std::string& url, int64_t offset,
                        const std::function<bool(const char*, size_t, long)>& sink,
                        const std::function<void(int64_t)>& progress) const;

    // Percent-encodes one path segment ("refs/pr/1" -> "refs%2Fpr%2F1").
    static std::string escape(const std::string& segment);

  private:
    std::string token_;
};

}  // namespace miniinfer::hub
