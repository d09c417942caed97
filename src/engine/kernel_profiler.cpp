#include "engine/kernel_profiler.h"

#include <fmt/format.h>

#include <cxxabi.h>

#include <algorithm>
#include <cstdlib>
#include <map>
#include <memory>
#include <mutex>

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

// What the completed buffers add up to, by mangled name (CUPTI calls back on its own thread).
std::mutex g_mutex;
std::map<std::string, KernelTime> g_times;
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
        KernelTime& t = g_times[k->name ? k->name : "?"];
        t.calls += 1;
        t.total_us += double(k->end - k->start) / 1000.0;
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
        g_times.clear();
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
    std::map<std::string, KernelTime> by_short;  // variants with one short name added up
    for (const auto& [mangled, t] : g_times) {
        KernelTime& s = by_short[kernel_display_name(mangled)];
        s.calls += t.calls;
        s.total_us += t.total_us;
    }
    std::vector<KernelTime> out;
    for (auto& [name, t] : by_short) out.push_back({name, t.calls, t.total_us});
    std::sort(out.begin(), out.end(),
              [](const KernelTime& a, const KernelTime& b) { return a.total_us > b.total_us; });
    return out;
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
    double total = 0;
    int64_t calls = 0;
    for (const KernelTime& t : times) {
        total += t.total_us;
        calls += t.calls;
    }
    std::string out =
        fmt::format("{} kernel launches, {:.1f} ms of kernel time\n", calls, total / 1000.0);
    out += "| kernel | calls | total ms | % of kernel time | mean us |\n|---|---|---|---|---|\n";
    double rest = total;
    int64_t rest_calls = calls;
    for (size_t i = 0; i < times.size() && i < top; ++i) {
        const KernelTime& t = times[i];
        out += fmt::format("| {} | {} | {:.2f} | {:.1f}% | {:.1f} |\n", t.name, t.calls,
                           t.total_us / 1000.0, 100.0 * t.total_us / std::max(total, 1e-9),
                           t.total_us / double(std::max<int64_t>(t.calls, 1)));
        rest -= t.total_us;
        rest_calls -= t.calls;
    }
    if (times.size() > top)
        out += fmt::format("| ({} others) | {} | {:.2f} | {:.1f}% | |\n", times.size() - top,
                           rest_calls, rest / 1000.0, 100.0 * rest / std::max(total, 1e-9));
    return out;
}

}  // namespace miniinfer
