#include "engine/kernel_profiler.h"

#include <fmt/format.h>

#include <cxxabi.h>

#include <algorithm>
#include <cstdlib>
#include <map>
#include <memory>
#include <mutex>
#include <utility>

#include "core/check.h"

#ifdef MINIINFER_HAS_CUDA
#include <cuda_runtime.h>
#include <cupti.h>
#include <dlfcn.h>
#endif

namespace miniinfer {

#ifdef MINIINFER_HAS_CUDA
namespace {

// The CUPTI functions used, looked up in libcupti.so at the first start.
struct Cupti {
    CUptiResult (*register_callbacks)(CUpti_BuffersCallbackRequestFunc,
                                      CUpti_BuffersCallbackCompleteFunc);
    CUptiResult (*enable)(CUpti_ActivityKind);
    CUptiResult (*disable)(CUpti_ActivityKind);
    CUptiResult (*flush_all)(uint32_t);
    CUptiResult (*next_record)(uint8_t*, size_t, CUpti_Activity**);
    CUptiResult (*result_string)(CUptiResult, const char**);
};

const Cupti& cupti() {
    static const Cupti api = [] {
        void* lib = nullptr;
        for (const char* name : {"libcupti.so", "libcupti.so.13", "libcupti.so.12"})
            if ((lib = dlopen(name, RTLD_NOW | RTLD_LOCAL))) break;
        if (!lib)
            fail(
                "--profile-kernels needs CUPTI (libcupti.so from the CUDA toolkit) on the "
                "library path: {}",
                dlerror());
        auto get = [&](const char* symbol) {
            void* f = dlsym(lib, symbol);
            if (!f) fail("CUPTI: {} not found in libcupti.so", symbol);
            return f;
        };
        Cupti c;
        c.register_callbacks =
            reinterpret_cast<decltype(c.register_callbacks)>(get("cuptiActivityRegisterCallbacks"));
        c.enable = reinterpret_cast<decltype(c.enable)>(get("cuptiActivityEnable"));
        c.disable = reinterpret_cast<decltype(c.disable)>(get("cuptiActivityDisable"));
        c.flush_all = reinterpret_cast<decltype(c.flush_all)>(get("cuptiActivityFlushAll"));
        c.next_record =
            reinterpret_cast<decltype(c.next_record)>(get("cuptiActivityGetNextRecord"));
        c.result_string = reinterpret_cast<decltype(c.result_string)>(get("cuptiGetResultString"));
        return c;
    }();
    return api;
}

void check(CUptiResult r, const char* what) {
    if (r == CUPTI_SUCCESS) return;
    const char* message = "unknown error";
    cupti().result_string(r, &message);
    fail("CUPTI: {} failed: {}", what, message);
}

// The completed buffers' kernels (CUPTI calls back on its own thread).
std::mutex g_mutex;
std::vector<KernelRecord> g_records;
bool g_active = false;

constexpr size_t kBufferBytes = size_t(8) << 20;

void CUPTIAPI buffer_requested(uint8_t** buffer, size_t* size, size_t* max_records) {
    *buffer = static_cast<uint8_t*>(std::aligned_alloc(8, kBufferBytes));
    *size = *buffer ? kBufferBytes : 0;
    *max_records = 0;
}

void CUPTIAPI buffer_completed(CUcontext, uint32_t, uint8_t* buffer, size_t, size_t valid_size) {
    std::lock_guard<std::mutex> lock(g_mutex);
    CUpti_Activity* record = nullptr;
    while (cupti().next_record(buffer, valid_size, &record) == CUPTI_SUCCESS) {
        if (record->kind != CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL &&
            record->kind != CUPTI_ACTIVITY_KIND_KERNEL)
            continue;
        const auto* k = reinterpret_cast<const CUpti_ActivityKernel10*>(record);
        g_records.push_back({k->name ? k->name : "?", k->streamId, k->start, k->end});
    }
    std::free(buffer);
}

}  // namespace

KernelProfiler::KernelProfiler() {
    const Cupti& c = cupti();
    {
        std::lock_guard<std::mutex> lock(g_mutex);
        if (g_active) fail("KernelProfiler: one profiler at a time");
        g_active = true;
        g_records.clear();
    }
    static const bool registered = [&] {
        check(c.register_callbacks(buffer_requested, buffer_completed),
              "cuptiActivityRegisterCallbacks");
        return true;
    }();
    (void)registered;
    check(c.enable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL), "cuptiActivityEnable");
    running_ = true;
}

KernelProfiler::~KernelProfiler() {
    if (running_) try {
            stop();
        } catch (const Error&) {
        }
}

std::vector<KernelTime> KernelProfiler::stop() {
    if (!running_) return {};
    running_ = false;
    const Cupti& c = cupti();
    cudaDeviceSynchronize();
    check(c.disable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL), "cuptiActivityDisable");
    check(c.flush_all(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED), "cuptiActivityFlushAll");
    std::lock_guard<std::mutex> lock(g_mutex);
    g_active = false;
    std::vector<KernelRecord> records = std::move(g_records);
    g_records.clear();
    std::map<std::string, std::string> short_names;  // variants with one short name added up
    for (KernelRecord& r : records) {
        auto [at, fresh] = short_names.try_emplace(r.name);
        if (fresh) at->second = kernel_display_name(r.name);
        r.name = at->second;
    }
    return sum_kernel_records(std::move(records));
}

#else  // no CUDA in this build

KernelProfiler::KernelProfiler() {
    fail("--profile-kernels needs a CUDA build (this one has the CPU backend only)");
}
KernelProfiler::~KernelProfiler() = default;
std::vector<KernelTime> KernelProfiler::stop() {
    return {};
}

#endif

std::vector<KernelTime> sum_kernel_records(std::vector<KernelRecord> records) {
    std::sort(records.begin(), records.end(), [](const KernelRecord& a, const KernelRecord& b) {
        return a.stream != b.stream ? a.stream < b.stream : a.start_ns < b.start_ns;
    });
    std::map<std::string, KernelTime> by_name;
    uint64_t stream_end = 0;  // the latest end so far on the record's stream
    for (size_t i = 0; i < records.size(); ++i) {
        const KernelRecord& r = records[i];
        if (i == 0 || records[i - 1].stream != r.stream) stream_end = 0;
        const uint64_t from = std::max(r.start_ns, stream_end);
        stream_end = std::max(stream_end, r.end_ns);
        KernelTime& t = by_name[r.name];
        t.name = r.name;
        t.calls += 1;
        t.total_us += double(r.end_ns - r.start_ns) / 1000.0;
        t.exposed_us += r.end_ns > from ? double(r.end_ns - from) / 1000.0 : 0.0;
    }
    std::vector<KernelTime> out;
    for (auto& [name, t] : by_name) out.push_back(std::move(t));
    std::sort(out.begin(), out.end(),
              [](const KernelTime& a, const KernelTime& b) { return a.total_us > b.total_us; });
    return out;
}

std::string kernel_display_name(const std::string& mangled) {
    int status = 0;
    std::unique_ptr<char, void (*)(void*)> demangled(
        abi::__cxa_demangle(mangled.c_str(), nullptr, nullptr, &status), std::free);
    std::string name = status == 0 && demangled ? demangled.get() : mangled;
    if (name.rfind("void ", 0) == 0) name.erase(0, 5);  // a function template's return type
    for (const std::string prefix : {"miniinfer::cuda::(anonymous namespace)::",
                                     "miniinfer::cuda::", "(anonymous namespace)::"}) {
        for (size_t at; (at = name.find(prefix)) != std::string::npos;)
            name.erase(at, prefix.size());
    }
    int depth = 0;  // cut at the parameter list: the first '(' outside template arguments
    for (size_t i = 0; i < name.size(); ++i) {
        if (name[i] == '<') ++depth;
        if (name[i] == '>') --depth;
        if (name[i] == '(' && depth == 0 && i > 0) {
            name.resize(i);
            break;
        }
    }
    if (name.size() > 100) name = name.substr(0, 97) + "...";
    return name;
}

std::string format_kernel_times(const std::vector<KernelTime>& times, size_t top) {
    double total = 0, exposed = 0;
    int64_t calls = 0;
    for (const KernelTime& t : times) {
        total += t.total_us;
        exposed += t.exposed_us;
        calls += t.calls;
    }
    std::string out = fmt::format(
        "{} kernel launches, {:.1f} ms of kernel time, {:.1f} ms of it exposed (not overlapped "
        "by the kernel before)\n",
        calls, total / 1000.0, exposed / 1000.0);
    out +=
        "| kernel | calls | total ms | % of kernel time | mean us | exposed ms | % of exposed | "
        "mean exposed us |\n|---|---|---|---|---|---|---|---|\n";
    const auto share = [](double part, double whole) {
        return 100.0 * part / std::max(whole, 1e-9);
    };
    double rest = total, rest_exposed = exposed;
    int64_t rest_calls = calls;
    for (size_t i = 0; i < times.size() && i < top; ++i) {
        const KernelTime& t = times[i];
        const double n = double(std::max<int64_t>(t.calls, 1));
        out += fmt::format("| {} | {} | {:.2f} | {:.1f}% | {:.1f} | {:.2f} | {:.1f}% | {:.1f} |\n",
                           t.name, t.calls, t.total_us / 1000.0, share(t.total_us, total),
                           t.total_us / n, t.exposed_us / 1000.0, share(t.exposed_us, exposed),
                           t.exposed_us / n);
        rest -= t.total_us;
        rest_exposed -= t.exposed_us;
        rest_calls -= t.calls;
    }
    if (times.size() > top)
        out += fmt::format("| ({} others) | {} | {:.2f} | {:.1f}% | | {:.2f} | {:.1f}% | |\n",
                           times.size() - top, rest_calls, rest / 1000.0, share(rest, total),
                           rest_exposed / 1000.0, share(rest_exposed, exposed));
    return out;
}

}  // namespace miniinfer
