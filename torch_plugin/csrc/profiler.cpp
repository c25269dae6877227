// The emu device in PyTorch's own profiler (torch.profiler, torch.autograd.profiler).
//
// Two registrations, one per way PyTorch 2.13 profiles a PrivateUse1 device:
// - ProfilerStubs (registerPrivateUse1Methods): the "legacy" mode of
//   torch.autograd.profiler.profile(use_device="emu") (KINETO_PRIVATEUSE1_FALLBACK).
//   Each op's start and end record an emu event on the current stream; its device
//   time is the modelled time between the two events.
// - A kineto child activity profiler (PrivateUse1ProfilerRegistry): the mode of
//   torch.profiler.profile() with ProfilerActivity.PrivateUse1. While it records,
//   torch_plugin.profile's feed notes every device command with the correlation id
//   of the op that submitted it; at stop, each command becomes a kernel/memcpy/memset
//   activity whose duration is its modelled device time, linked to that op.
// Device times are modelled, never wall time. The activities are placed on the wall
// clock of the host ops (kineto has one time axis): a command starts when its op
// submitted it, or when the previous command of its ring ended on that axis.
#ifndef FMT_HEADER_ONLY
// kineto's GenericTraceActivity formats with fmt inline; libtorch does not export fmt.
#define FMT_HEADER_ONLY
#endif
#ifndef USE_KINETO
// The torch wheel's libtorch is built with kineto (it exports the registry); the
// registry's header is only visible with this defined.
#define USE_KINETO
#endif

#include "emu_core.h"

#include <c10/util/ApproximateClock.h>
#include <torch/csrc/profiler/standalone/privateuse1_profiler.h>
#include <torch/csrc/profiler/stubs/base.h>

#include <libkineto.h>

#include <algorithm>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <utility>
#include <vector>

namespace py = pybind11;

namespace emu {

namespace {

using torch::profiler::impl::ProfilerVoidEventStub;

// --------------------------------------------------------- legacy stubs ---

struct EmuProfilerStubs final : public torch::profiler::impl::ProfilerStubs {
  void record(c10::DeviceIndex* device, ProfilerVoidEventStub* event, int64_t* cpu_ns)
      const override {
    c10::DeviceIndex index = current_device();
    if (device != nullptr) {
      *device = index;
    }
    // flags 1 = BACKEND_DEFAULT: a timing event (bridge.event_create).
    auto id = call<int64_t>("event_create", index, 1);
    TORCH_CHECK(id > 0, "emu: bridge.event_create returned invalid id ", id);
    // The stub owns the bridge event: the shared_ptr's deleter destroys it.
    *event = std::shared_ptr<void>(va_ptr(static_cast<uint64_t>(id)), [index](void* ptr) {
      call_noexcept("event_destroy", static_cast<int64_t>(va(ptr)), index);
    });
    if (cpu_ns != nullptr) {
      *cpu_ns = c10::getTime();
    }
    call("event_record", id, index, current_stream_id(index));
  }

  float elapsed(const ProfilerVoidEventStub* event, const ProfilerVoidEventStub* event2)
      const override {
    if (event == nullptr || event2 == nullptr || !*event || !*event2) {
      return 0.0f;
    }
    auto start = static_cast<int64_t>(va(event->get()));
    auto end = static_cast<int64_t>(va(event2->get()));
    call("event_synchronize", start);
    call("event_synchronize", end);
    // Modelled milliseconds -> the microseconds the profiler wants.
    return static_cast<float>(call<double>("event_elapsed_ms", start, end, -1) * 1000.0);
  }

  // emu has no range annotations (NVTX's role); the kineto mode records ops itself.
  void mark(const char* /*name*/) const override {}
  void rangePush(const char* /*name*/) const override {}
  void rangePop() const override {}

  bool enabled() const override {
    return true;
  }

  void onEachDevice(std::function<void(int)> op) const override {
    c10::DeviceIndex previous = current_device();
    c10::DeviceIndex count = device_count();
    for (c10::DeviceIndex i = 0; i < count; ++i) {
      set_device(i);
      op(i);
    }
    set_device(previous);
  }

  void synchronize() const override {
    c10::DeviceIndex count = device_count();
    for (c10::DeviceIndex i = 0; i < count; ++i) {
      call("device_synchronize", i);
    }
  }
};

// ------------------------------------------------- kineto child profiler ---

// The op correlation ids PyTorch pushes around each op, per thread (the submitting
// thread of a command is the thread of its op, autograd's worker included).
thread_local std::vector<uint64_t> tl_correlation;

// One device command of the profiled block, as torch_plugin.profile's feed reports it.
struct DeviceCommand {
  std::string name;
  std::string kind; // "kernel", "memcpy" or "memset"
  int64_t device;
  int64_t ring;
  int64_t seq;
  int64_t submit_wall_ns; // wall clock (c10::getTime) when its op submitted it
  double start_ns;        // modelled device time
  double end_ns;
  uint64_t correlation;   // 0: submitted outside any op
};

libkineto::ActivityType activity_type(const std::string& kind) {
  if (kind == "memcpy") {
    return libkineto::ActivityType::GPU_MEMCPY;
  }
  if (kind == "memset") {
    return libkineto::ActivityType::GPU_MEMSET;
  }
  return libkineto::ActivityType::CONCURRENT_KERNEL;
}

py::object profile_module() {
  return py::module_::import("torch_plugin.profile");
}

class EmuProfilerSession final : public libkineto::IActivityProfilerSession {
 public:
  void start() override {
    start_ns_ = c10::getTime();
    try {
      py::gil_scoped_acquire gil;
      profile_module().attr("_torch_profiler_start")();
    } catch (const std::exception& e) {
      // A device that cannot start (a broken configuration) must not stop the host's profile.
      errors_.push_back(std::string("emu: starting the device trace failed: ") + e.what());
      TORCH_WARN("emu: the profile has no emu device activities: ", e.what());
    }
    status_ = libkineto::TraceStatus::RECORDING;
  }

  void stop() override {
    end_ns_ = c10::getTime();
    try {
      py::gil_scoped_acquire gil;
      py::list rows = profile_module().attr("_torch_profiler_stop")();
      for (const auto& item : rows) {
        auto row = item.cast<py::tuple>();
        commands_.push_back(DeviceCommand{
            row[0].cast<std::string>(), row[1].cast<std::string>(), row[2].cast<int64_t>(),
            row[3].cast<int64_t>(), row[4].cast<int64_t>(), row[5].cast<int64_t>(),
            row[6].cast<double>(), row[7].cast<double>(), row[8].cast<uint64_t>()});
      }
    } catch (const std::exception& e) {
      // Kineto collects errors rather than propagating them out of stop().
      errors_.push_back(std::string("emu: collecting the device commands failed: ") + e.what());
    }
    status_ = libkineto::TraceStatus::PROCESSING;
  }

  std::vector<std::string> errors() override {
    return errors_;
  }

  void processTrace(libkineto::ActivityLogger& logger) override {
    processTrace(logger, nullptr, 0, 0);
  }

  void processTrace(libkineto::ActivityLogger& logger,
                    libkineto::getLinkedActivityCallback linked_activity,
                    int64_t /*start_time*/, int64_t /*end_time*/) override {
    buffer_.span = libkineto::TraceSpan(start_ns_, end_ns_, "emu");
    // Commands of one ring run in order: on the shared time axis each starts when
    // its op submitted it or when the ring's previous command ended, whichever is later.
    std::map<std::pair<int64_t, int64_t>, int64_t> ring_free_at;
    for (const auto& cmd : commands_) {
      auto duration = static_cast<int64_t>(std::max(0.0, cmd.end_ns - cmd.start_ns));
      int64_t& free_at = ring_free_at[{cmd.device, cmd.ring}];
      int64_t start = std::max(cmd.submit_wall_ns, free_at);
      free_at = start + duration;
      auto activity = std::make_unique<libkineto::GenericTraceActivity>(
          buffer_.span, activity_type(cmd.kind), cmd.name);
      activity->startTime = start;
      activity->endTime = start + duration;
      activity->id = static_cast<int32_t>(cmd.seq);
      activity->device = static_cast<int32_t>(cmd.device);
      activity->resource = static_cast<int32_t>(cmd.ring);
      activity->threadId = static_cast<int32_t>(cmd.ring);
      if (cmd.correlation != 0 && linked_activity) {
        activity->linked = linked_activity(static_cast<int32_t>(cmd.correlation));
      }
      activity->addMetadata("seq", cmd.seq);
      activity->addMetadata("ring", cmd.ring);
      activity->addMetadata("modelled_start_us", cmd.start_ns / 1e3);
      activity->addMetadata("modelled_end_us", cmd.end_ns / 1e3);
      if (cmd.correlation != 0) {
        activity->addMetadata("correlation", cmd.correlation);
      }
      // Logged here (the trace keeps pointers); owned by the buffer kineto takes after.
      activity->log(logger);
      buffer_.activities.push_back(std::move(activity));
    }
    commands_.clear();
  }

  std::unique_ptr<libkineto::DeviceInfo> getDeviceInfo() override {
    return nullptr;
  }

  std::vector<libkineto::ResourceInfo> getResourceInfos() override {
    return {};
  }

  std::unique_ptr<libkineto::CpuTraceBuffer> getTraceBuffer() override {
    return std::make_unique<libkineto::CpuTraceBuffer>(std::move(buffer_));
  }

  void pushCorrelationId(uint64_t id) override {
    tl_correlation.push_back(id);
  }

  void popCorrelationId() override {
    if (!tl_correlation.empty()) {
      tl_correlation.pop_back();
    }
  }

 private:
  int64_t start_ns_ = 0;
  int64_t end_ns_ = 0;
  std::vector<DeviceCommand> commands_;
  std::vector<std::string> errors_;
  libkineto::CpuTraceBuffer buffer_;
};

class EmuActivityProfiler final : public libkineto::IActivityProfiler {
 public:
  const std::string& name() const override {
    return name_;
  }

  const std::set<libkineto::ActivityType>& availableActivities() const override {
    return activities_;
  }

  std::unique_ptr<libkineto::IActivityProfilerSession> configure(
      const std::set<libkineto::ActivityType>& /*activity_types*/,
      const libkineto::Config& /*config*/) override {
    return std::make_unique<EmuProfilerSession>();
  }

  std::unique_ptr<libkineto::IActivityProfilerSession> configure(
      int64_t /*ts_ms*/, int64_t /*duration_ms*/,
      const std::set<libkineto::ActivityType>& activity_types,
      const libkineto::Config& config) override {
    return configure(activity_types, config);
  }

 private:
  std::string name_{"emu"};
  std::set<libkineto::ActivityType> activities_{
      libkineto::ActivityType::CONCURRENT_KERNEL,
      libkineto::ActivityType::GPU_MEMCPY,
      libkineto::ActivityType::GPU_MEMSET,
  };
};

} // namespace

uint64_t profiler_correlation_id() {
  return tl_correlation.empty() ? 0 : tl_correlation.back();
}

int64_t profiler_wall_ns() {
  return c10::getTime();
}

void register_profiler() {
  static std::once_flag once;
  std::call_once(once, [] {
    // Leaked: the profiler keeps the raw pointer for the life of the process.
    torch::profiler::impl::registerPrivateUse1Methods(new EmuProfilerStubs());
    torch::profiler::impl::PrivateUse1ProfilerRegistry::instance().registerFactory(
        []() -> std::unique_ptr<libkineto::IActivityProfiler> {
          return std::make_unique<EmuActivityProfiler>();
        });
  });
}

} // namespace emu
