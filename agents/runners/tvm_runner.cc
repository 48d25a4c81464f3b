// tvm_runner: the TVM route runner, runtime-only (links libtvm_runtime + libtvm_ffi, never
// the TVM compiler), so the peak memory it reports is the TVM runtime's own.
//
// Contract (docs/ARCHITECTURE.md, "Route runner contract"):
//   tvm_runner --request REQ.json
// REQ: {"route":"tvm", "model": lib.so, "inputs": in.ftns, "outputs": out.ftns, "threads": N,
//       "options": {"meta": lib.so.json (default: model + ".json")},
//       "policy": {warmup_runs, warmup_min_s, min_runs, min_time_s, max_time_s},
//       "profile_runs": K}
// stdout: JSON lines loaded, info, first, warmup, samples..., outputs, ops, memory, done|error.
// The sidecar `<lib>.so.json` written by farm.build.tvm names the outputs and gives each
// kernel its category and schedule source; without it kernels fall back to "other".
#include <tvm/ffi/container/array.h>
#include <tvm/ffi/container/map.h>
#include <tvm/ffi/container/tensor.h>
#include <tvm/ffi/extra/json.h>
#include <tvm/ffi/extra/module.h>
#include <tvm/ffi/function.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <sstream>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

namespace ffi = tvm::ffi;
namespace json = tvm::ffi::json;

namespace {

double now_ms() {
  using clock = std::chrono::steady_clock;
  return std::chrono::duration<double, std::milli>(clock::now().time_since_epoch()).count();
}

void emit(const json::Object& ev) {
  std::string line = std::string(json::Stringify(ev));
  std::fwrite(line.data(), 1, line.size(), stdout);
  std::fputc('\n', stdout);
  std::fflush(stdout);
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("cannot read " + path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// ---- FTNS (little-endian; this runner only targets little-endian CPUs) ----
struct CPUAlloc {
  void AllocData(DLTensor* t) {
    size_t n = 1;
    for (int i = 0; i < t->ndim; ++i) n *= static_cast<size_t>(t->shape[i]);
    t->data = std::aligned_alloc(64, ((n * ((t->dtype.bits * t->dtype.lanes + 7) / 8)) + 63) / 64 * 64);
  }
  void FreeData(DLTensor* t) { std::free(t->data); }
};

const DLDataType kDtypes[] = {{kDLFloat, 32, 1}, {kDLInt, 64, 1}, {kDLInt, 32, 1},
                              {kDLInt, 8, 1},    {kDLUInt, 8, 1}};

uint32_t dtype_code(DLDataType t) {
  for (uint32_t i = 0; i < 5; ++i)
    if (kDtypes[i].code == t.code && kDtypes[i].bits == t.bits) return i;
  throw std::runtime_error("output dtype not representable in FTNS");
}

size_t nbytes_of(const DLTensor* t) {
  size_t n = (t->dtype.bits * t->dtype.lanes + 7) / 8;
  for (int i = 0; i < t->ndim; ++i) n *= static_cast<size_t>(t->shape[i]);
  return n;
}

template <typename T>
T take(const std::string& buf, size_t* pos) {
  if (*pos + sizeof(T) > buf.size()) throw std::runtime_error("FTNS file truncated");
  T v;
  std::memcpy(&v, buf.data() + *pos, sizeof(T));
  *pos += sizeof(T);
  return v;
}

std::vector<std::pair<std::string, ffi::Tensor>> read_ftns(const std::string& path) {
  std::string buf = read_file(path);
  size_t pos = 0;
  if (buf.compare(0, 4, "FTNS") != 0) throw std::runtime_error(path + ": not an FTNS file");
  pos = 4;
  if (take<uint32_t>(buf, &pos) != 1) throw std::runtime_error(path + ": FTNS version != 1");
  uint32_t count = take<uint32_t>(buf, &pos);
  std::vector<std::pair<std::string, ffi::Tensor>> out;
  for (uint32_t i = 0; i < count; ++i) {
    uint32_t name_len = take<uint32_t>(buf, &pos);
    std::string name = buf.substr(pos, name_len);
    pos += name_len;
    uint32_t code = take<uint32_t>(buf, &pos);
    if (code > 4) throw std::runtime_error(path + ": unknown FTNS dtype");
    uint32_t ndim = take<uint32_t>(buf, &pos);
    std::vector<int64_t> shape(ndim);
    for (auto& d : shape) d = take<int64_t>(buf, &pos);
    uint64_t nbytes = take<uint64_t>(buf, &pos);
    ffi::Tensor t = ffi::Tensor::FromNDAlloc(CPUAlloc(), ffi::Shape(shape), kDtypes[code],
                                             DLDevice{kDLCPU, 0});
    if (nbytes != nbytes_of(t.GetDLTensorPtr()) || pos + nbytes > buf.size())
      throw std::runtime_error(path + ": tensor " + name + " has a bad byte count");
    std::memcpy(t.data_ptr(), buf.data() + pos, nbytes);
    pos += nbytes;
    out.emplace_back(name, t);
  }
  return out;
}

void write_ftns(const std::string& path,
                const std::vector<std::pair<std::string, ffi::Tensor>>& tensors) {
  std::ofstream out(path, std::ios::binary);
  if (!out) throw std::runtime_error("cannot write " + path);
  auto put = [&out](const void* p, size_t n) { out.write(static_cast<const char*>(p), n); };
  uint32_t version = 1, count = static_cast<uint32_t>(tensors.size());
  put("FTNS", 4);
  put(&version, 4);
  put(&count, 4);
  for (const auto& [name, t] : tensors) {
    const DLTensor* dl = t.GetDLTensorPtr();
    uint32_t len = static_cast<uint32_t>(name.size()), code = dtype_code(dl->dtype);
    uint32_t ndim = static_cast<uint32_t>(dl->ndim);
    uint64_t nbytes = nbytes_of(dl);
    put(&len, 4);
    put(name.data(), len);
    put(&code, 4);
    put(&ndim, 4);
    put(dl->shape, 8 * ndim);
    put(&nbytes, 8);
    put(static_cast<const char*>(dl->data) + dl->byte_offset, nbytes);
  }
}

// ---- memory of this process (the runtime only) ----
long status_kb(const char* file, const char* key) {
  std::ifstream in(file);
  std::string line;
  size_t klen = std::strlen(key);
  while (std::getline(in, line))
    if (line.compare(0, klen, key) == 0) return std::atol(line.c_str() + klen);
  return -1;
}

template <typename T>
T get_or(const json::Object& obj, const char* key, T fallback) {
  auto it = obj.find(key);
  if (it == obj.end() || (*it).second == nullptr) return fallback;
  if constexpr (std::is_same_v<T, ffi::Any>) {
    return (*it).second;
  } else {
    return (*it).second.cast<T>();
  }
}

double num_or(const json::Object& obj, const char* key, double fallback) {
  auto it = obj.find(key);
  if (it == obj.end() || (*it).second == nullptr) return fallback;
  const ffi::Any& v = (*it).second;
  if (auto i = v.try_cast<int64_t>()) return static_cast<double>(*i);
  return v.cast<double>();
}

std::vector<ffi::Tensor> flatten_outputs(const ffi::Any& ret) {
  std::vector<ffi::Tensor> outs;
  if (auto t = ret.try_cast<ffi::Tensor>()) {
    outs.push_back(*t);
  } else if (auto arr = ret.try_cast<ffi::Array<ffi::Any>>()) {
    for (const ffi::Any& item : *arr) {
      auto nested = flatten_outputs(item);
      outs.insert(outs.end(), nested.begin(), nested.end());
    }
  } else {
    throw std::runtime_error("main returned neither a tensor nor a tuple of tensors");
  }
  return outs;
}

int run(const std::string& request_path) {
  json::Object req = json::Parse(read_file(request_path)).cast<json::Object>();
  std::string lib_path = req.at("model").cast<ffi::String>();
  json::Object options = get_or(req, "options", json::Object());
  json::Object policy = get_or(req, "policy", json::Object());
  int64_t threads = static_cast<int64_t>(num_or(req, "threads", 1));
  // the TVM thread pool reads this once, when the first parallel kernel runs
  setenv("TVM_NUM_THREADS", std::to_string(threads).c_str(), 1);

  std::string meta_path = get_or(options, "meta", ffi::String(lib_path + ".json"));
  json::Object meta;
  std::ifstream probe(meta_path);
  if (probe.good()) meta = json::Parse(read_file(meta_path)).cast<json::Object>();
  json::Object kernels = get_or(meta, "kernels", json::Object());

  // the idle baseline: the runtime's libraries mapped, no model loaded (the decision
  // matrix judges memory on what the model adds to it, the same way for every route)
  long baseline = status_kb("/proc/self/status", "VmHWM:");
  double t0 = now_ms();
  ffi::Module lib = ffi::Module::LoadFromFile(lib_path);
  ffi::Module vm = (*lib->GetFunction("vm_load_executable"))().cast<ffi::Module>();
  // (device type, id, allocator) for the CPU; 2 = pooled allocator, as relax.VirtualMachine
  (*vm->GetFunction("vm_initialization"))(static_cast<int>(kDLCPU), 0, 2);
  ffi::Function main_fn = *vm->GetFunction("main");
  emit(json::Object{{"ev", "loaded"}, {"load_ms", now_ms() - t0}});
  emit(json::Object{{"ev", "info"},
                    {"runtime", "tvm_runner (C++: libtvm_runtime + libtvm_ffi, no compiler)"},
                    {"threads", threads},
                    {"target", get_or(meta, "target", ffi::Any(nullptr))},
                    {"schedule_counts", get_or(meta, "schedule_counts", ffi::Any(nullptr))}});

  // arguments: by parameter name when the input file carries it, else in file order
  auto inputs = read_ftns(req.at("inputs").cast<ffi::String>());
  std::map<std::string, ffi::Tensor> by_name(inputs.begin(), inputs.end());
  ffi::Function arity = *vm->GetFunction("get_function_arity");
  ffi::Function param_name = *vm->GetFunction("get_function_param_name");
  int64_t n_params = arity("main").cast<int64_t>();
  std::vector<ffi::Any> args;
  for (int64_t i = 0; i < n_params; ++i) {
    std::string name = param_name("main", i).cast<ffi::String>();
    auto it = by_name.find(name);
    if (it != by_name.end()) {
      args.emplace_back(it->second);
    } else if (i < static_cast<int64_t>(inputs.size())) {
      args.emplace_back(inputs[i].second);
    } else {
      throw std::runtime_error("input file has no tensor for parameter " + name);
    }
  }
  std::vector<ffi::AnyView> views(args.begin(), args.end());
  auto infer = [&]() {
    ffi::Any ret;
    main_fn.CallPacked(views.data(), static_cast<int32_t>(views.size()), &ret);
    return ret;
  };

  double t1 = now_ms();
  ffi::Any ret = infer();
  emit(json::Object{{"ev", "first"}, {"ms", now_ms() - t1}});

  double warm_start = now_ms();
  int64_t warm_runs = 0, need_warm = static_cast<int64_t>(num_or(policy, "warmup_runs", 1));
  double warm_min = num_or(policy, "warmup_min_s", 0) * 1000;
  while (warm_runs < need_warm || now_ms() - warm_start < warm_min) {
    infer();
    ++warm_runs;
  }
  emit(json::Object{{"ev", "warmup"}, {"runs", warm_runs}, {"ms_total", now_ms() - warm_start}});

  int64_t min_runs = static_cast<int64_t>(num_or(policy, "min_runs", 10));
  double min_time = num_or(policy, "min_time_s", 0) * 1000;
  double max_time = num_or(policy, "max_time_s", 60) * 1000;
  double start = now_ms();
  int64_t n = 0;
  ffi::Array<ffi::Any> batch;
  while ((n < min_runs || now_ms() - start < min_time) && now_ms() - start < max_time) {
    double s = now_ms();
    ret = infer();
    batch.push_back(now_ms() - s);
    ++n;
    if (batch.size() == 100) {
      emit(json::Object{{"ev", "samples"}, {"ms", batch}});
      batch = ffi::Array<ffi::Any>();
    }
  }
  if (!batch.empty()) emit(json::Object{{"ev", "samples"}, {"ms", batch}});

  std::vector<ffi::Tensor> outs = flatten_outputs(ret);
  ffi::Array<ffi::Any> out_names = get_or(meta, "outputs", ffi::Array<ffi::Any>());
  std::vector<std::pair<std::string, ffi::Tensor>> named;
  for (size_t i = 0; i < outs.size(); ++i) {
    std::string name = i < out_names.size() ? std::string(out_names[i].cast<ffi::String>())
                                             : "output_" + std::to_string(i);
    named.emplace_back(name, outs[i]);
  }
  std::string out_path = req.at("outputs").cast<ffi::String>();
  write_ftns(out_path, named);
  emit(json::Object{{"ev", "outputs"}, {"file", out_path}});

  int64_t profile_runs = static_cast<int64_t>(num_or(req, "profile_runs", 0));
  if (profile_runs > 0) {
    // per-kernel wall time through the VM's instrument hook (called before and after each
    // packed call); VM builtins (allocation, shape checks) are not kernels and are skipped.
    // Each kernel keeps its time per run and reports the median over the runs: one run
    // preempted on a busy device moves a mean, not a median.
    std::map<std::string, std::vector<double>> kernel_ms;
    std::map<std::string, double> started;
    size_t run = 0;
    ffi::Function hook = ffi::Function::FromPacked([&](ffi::PackedArgs a, ffi::Any* rv) {
      std::string sym = a[1].cast<ffi::String>();
      bool before = a[2].cast<bool>();
      if (sym.rfind("vm.builtin.", 0) != 0) {
        if (before) {
          started[sym] = now_ms();
        } else {
          std::vector<double>& per_run = kernel_ms[sym];
          per_run.resize(static_cast<size_t>(profile_runs), 0.0);
          per_run[run] += now_ms() - started[sym];
        }
      }
      *rv = 0;  // VMInstrumentReturnKind::kNoOp
    });
    (*vm->GetFunction("set_instrument"))(hook);
    // the profiled runs' own wall time: the report checks the per-op total against it
    std::vector<double> wall;
    for (run = 0; run < static_cast<size_t>(profile_runs); ++run) {
      double t0 = now_ms();
      infer();
      wall.push_back(now_ms() - t0);
    }
    std::sort(wall.begin(), wall.end());
    double run_ms = wall.size() % 2 ? wall[wall.size() / 2]
                                    : 0.5 * (wall[wall.size() / 2 - 1] + wall[wall.size() / 2]);
    (*vm->GetFunction("set_instrument"))(ffi::Any(nullptr));
    std::map<std::string, double> cats = {
        {"attention", 0}, {"fc", 0}, {"layernorm", 0}, {"gelu", 0}, {"other", 0}};
    ffi::Array<ffi::Any> nodes;
    double total = 0;
    for (auto& [sym, per_run] : kernel_ms) {
      std::sort(per_run.begin(), per_run.end());
      size_t mid = per_run.size() / 2;
      double ms = per_run.size() % 2 ? per_run[mid] : 0.5 * (per_run[mid - 1] + per_run[mid]);
      json::Object info = get_or(kernels, sym.c_str(), json::Object());
      std::string cat = get_or(info, "category", ffi::String("other"));
      if (!cats.count(cat)) cat = "other";
      cats[cat] += ms;
      total += ms;
      nodes.push_back(json::Object{{"name", sym}, {"op", get_or(info, "op", ffi::String(sym))},
                                   {"category", cat}, {"ms", ms},
                                   {"schedule", get_or(info, "schedule", ffi::String("?"))}});
    }
    json::Object categories;
    for (const auto& [k, v] : cats) categories.Set(k, v);
    emit(json::Object{{"ev", "ops"}, {"categories", categories}, {"total_ms", total},
                      {"run_ms", run_ms}, {"nodes", nodes}});
  }

  long hwm = status_kb("/proc/self/status", "VmHWM:");
  long pss = status_kb("/proc/self/smaps_rollup", "Pss:");
  emit(json::Object{{"ev", "memory"}, {"vmhwm_kb", static_cast<int64_t>(hwm)},
                    {"pss_kb", pss < 0 ? ffi::Any(nullptr) : ffi::Any(static_cast<int64_t>(pss))},
                    {"baseline_kb", baseline < 0 ? ffi::Any(nullptr)
                                                 : ffi::Any(static_cast<int64_t>(baseline))},
                    {"method", "runtime-only C++ runner, /proc/self/status VmHWM"}});
  emit(json::Object{{"ev", "done"}});
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  std::string request;
  for (int i = 1; i + 1 < argc; ++i)
    if (std::strcmp(argv[i], "--request") == 0) request = argv[i + 1];
  if (request.empty()) {
    std::fprintf(stderr, "usage: %s --request REQUEST.json\n", argv[0]);
    return 2;
  }
  try {
    return run(request);
  } catch (const std::exception& e) {
    emit(json::Object{{"ev", "error"}, {"message", std::string("tvm_runner: ") + e.what()}});
    return 1;
  }
}
