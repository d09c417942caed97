#include "loader/hub_http.h"

#include <curl/curl.h>
#include <fmt/format.h>

#include <algorithm>
#include <memory>
#include <mutex>

namespace miniinfer::hub {
namespace {

struct CurlDeleter {
    void operator()(CURL* c) const { curl_easy_cleanup(c); }
};
struct SlistDeleter {
    void operator()(curl_slist* l) const { curl_slist_free_all(l); }
};
using CurlHandle = std::unique_ptr<CURL, CurlDeleter>;
using HeaderList = std::unique_ptr<curl_slist, SlistDeleter>;

struct Transfer {
    CURL* curl = nullptr;
    HttpResult* result = nullptr;
    const std::function<bool(const char*, size_t, long)>* sink = nullptr;
    const std::function<void(int64_t)>* progress = nullptr;
    int64_t received = 0;
    bool sink_refused = false;
};

size_t on_header(char* data, size_t size, size_t count, void* user) {
    auto* t = static_cast<Transfer*>(user);
    std::string line(data, size * count);
    while (!line.empty() && (line.back() == '\n' || line.back() == '\r')) line.pop_back();
    const size_t colon = line.find(':');
    if (line.rfind("HTTP/", 0) == 0 || colon == std::string::npos) return size * count;
    std::string name = line.substr(0, colon);
    std::transform(name.begin(), name.end(), name.begin(),
                   [](unsigned char c) { return char(std::tolower(c)); });
    size_t begin = colon + 1;
    while (begin < line.size() && line[begin] == ' ') ++begin;
    t->result->headers.emplace(name, line.substr(begin));  // the first response's value stays
    return size * count;
}

size_t on_body(char* data, size_t size, size_t count, void* user) {
    auto* t = static_cast<Transfer*>(user);
    const size_t n = size * count;
    long status = 0;
    curl_easy_getinfo(t->curl, CURLINFO_RESPONSE_CODE, &status);
    if (!t->sink || status < 200 || status >= 300) {
        if (t->result->body.size() < (16u << 20)) t->result->body.append(data, n);
        return n;
    }
    if (!(*t->sink)(data, n, status)) {
        t->sink_refused = true;
        return 0;  // aborts with CURLE_WRITE_ERROR
    }
    t->received += int64_t(n);
    if (*t->progress) (*t->progress)(t->received);
    return n;
}

bool is_transient(CURLcode code) {
    switch (code) {
        case CURLE_PARTIAL_FILE:
        case CURLE_RECV_ERROR:
        case CURLE_SEND_ERROR:
        case CURLE_OPERATION_TIMEDOUT:
        case CURLE_GOT_NOTHING:
        case CURLE_HTTP2:
        case CURLE_HTTP2_STREAM:
            return true;
        default:
            return false;
    }
}

}  // namespace

std::string HttpResult::header(const std::string& lower_name) const {
    auto it = headers.find(lower_name);
    return it == headers.end() ? std::string() : it->second;
}

HttpClient::HttpClient(std::string token) : token_(std::move(token)) {
    static std::once_flag once;
    std::call_once(once, [] { curl_global_init(CURL_GLOBAL_DEFAULT); });
}

std::string HttpClient::escape(const std::string& segment) {
    CurlHandle curl(curl_easy_init());
    char* out = curl_easy_escape(curl.get(), segment.data(), int(segment.size()));
    std::string s = out ? out : segment;
    curl_free(out);
    return s;
}

namespace {

HttpResult perform(const std::string& url, const std::string& token, bool head,
                   bool follow_redirects, int64_t offset,
                   const std::function<bool(const char*, size_t, long)>* sink,
                   const std::function<void(int64_t)>* progress) {
    HttpResult result;
    CurlHandle curl(curl_easy_init());
    if (!curl) {
        result.transfer_error = "curl_easy_init failed";
        return result;
    }
    CURL* c = curl.get();
    HeaderList headers;
    if (!token.empty())
        headers.reset(
            curl_slist_append(headers.release(), ("Authorization: Bearer " + token).c_str()));
    // A Range header of our own, not CURLOPT_RESUME_FROM: a server that ignores it answers 200
    // with the whole file, which the sink takes as a restart (curl would give up instead).
    if (offset > 0)
        headers.reset(
            curl_slist_append(headers.release(), fmt::format("Range: bytes={}-", offset).c_str()));
    Transfer t{c, &result, sink, progress};
    curl_easy_setopt(c, CURLOPT_URL, url.c_str());
    curl_easy_setopt(c, CURLOPT_USERAGENT, "miniinfer/0.1");
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, headers.get());
    curl_easy_setopt(c, CURLOPT_FOLLOWLOCATION, follow_redirects ? 1L : 0L);
    curl_easy_setopt(c, CURLOPT_MAXREDIRS, 10L);
    curl_easy_setopt(c, CURLOPT_NOBODY, head ? 1L : 0L);
    curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT, 15L);
    // A stalled transfer (under 1 byte/s for 60 s) is a lost connection: retried, resumed.
    curl_easy_setopt(c, CURLOPT_LOW_SPEED_LIMIT, 1L);
    curl_easy_setopt(c, CURLOPT_LOW_SPEED_TIME, 60L);
    curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, on_header);
    curl_easy_setopt(c, CURLOPT_HEADERDATA, &t);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, &t);
    char error[CURL_ERROR_SIZE] = {};
    curl_easy_setopt(c, CURLOPT_ERRORBUFFER, error);

    const CURLcode code = curl_easy_perform(c);
    curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &result.status);
    if (code != CURLE_OK && !t.sink_refused) {
        result.transfer_error = error[0] ? error : curl_easy_strerror(code);
        result.transient = is_transient(code);
    } else if (t.sink_refused) {
        result.transfer_error = "write refused";
    }
    if (result.status >= 500) result.transient = true;
    return result;
}

}  // namespace

HttpResult HttpClient::get(const std::string& url) const {
    return perform(url, token_, /*head=*/false, /*follow_redirects=*/true, 0, nullptr, nullptr);
}

HttpResult HttpClient::head(const std::string& url) const {
    return perform(url, token_, /*head=*/true, /*follow_redirects=*/false, 0, nullptr, nullptr);
}

HttpResult HttpClient::download(const std::string& url, int64_t offset,
                                const std::function<bool(const char*, size_t, long)>& sink,
                                const std::function<void(int64_t)>& progress) const {
    return perform(url, token_, /*head=*/false, /*follow_redirects=*/true, offset, &sink,
                   &progress);
}

}  // namespace miniinfer::hub
