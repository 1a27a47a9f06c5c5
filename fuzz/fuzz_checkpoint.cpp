// libFuzzer target for the checkpoint reader, read as `gnn train --resume` and `gnn predict` read a
// run's model.npz: the meta arrays (format, recipe, hyper-parameters, preprocessing, every float
// finite), the model built from them, the weights and Adam's state (load_checkpoint), where training
// stands (State::load), SWA snapshots and a recipe's own state. The only acceptable outcomes are a
// loaded run or a gnn::Error; crashes, leaks, hangs, sanitizer reports and allocations past the host
// memory limit are bugs, and so is a loaded run whose weights or counters are out of range, and so is
// a refusal of a checkpoint exactly as gnn wrote it.
//
// Every member of an npz carries a CRC, so mutated file bytes rarely get past the zip layer. The input
// is therefore read two ways, by its first byte:
//   >= 0x80: the rest is the file itself (the zip and npy layers, as fuzz_npz.cpp, then the reader);
//   <  0x80: edits to one of the base checkpoints that scripts/fuzz.sh trains with the build's own gnn
//     (GNN_FUZZ_CHECKPOINTS: their paths, ':'-separated; byte 0 picks one), 11 bytes each: a key (u16,
//     of the arrays in name order), an op, a u32 index, a 32-bit value. The ops: remove the array, set an
//     element, convert the dtype, reshape or cut it, put another array under its name, or set an
//     element to NaN, an infinity, -1, 0, 2^63-1 or 1e300. The edited arrays are written as a valid npz,
//     so every edit reaches the checks behind the zip layer.
// The bytes go through a file in a temporary folder: the reader opens a regular file by path, as it
// does for a run.
#include <stdlib.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <limits>
#include <map>
#include <string>
#include <vector>

#include "apps/checkpoint.h"
#include "apps/train/run_state.h"
#include "io/npz.h"
#include "runtime/allocator.h"

namespace {

using namespace gnn;
using Arrays = std::map<std::string, Tensor>;

std::vector<Arrays>& bases() {
  static std::vector<Arrays> b = [] {
    std::vector<Arrays> out;
    const char* env = std::getenv("GNN_FUZZ_CHECKPOINTS");
    std::string list = env ? env : "";
    for (size_t at = 0; at < list.size();) {
      const size_t colon = std::min(list.find(':', at), list.size());
      if (colon > at) out.push_back(NpzReader(list.substr(at, colon - at)).load_all());
      at = colon + 1;
    }
    return out;
  }();
  return b;
}

void set_element(Tensor& t, int64_t i, double v) {
  switch (t.dtype()) {
    case DType::F32: t.f32()[i] = std::fabs(v) <= 3.4e38 || !std::isfinite(v) ? float(v) : float(v > 0 ? INFINITY : -INFINITY); break;
    case DType::F64: t.f64()[i] = v; break;
    case DType::I64: t.i64()[i] = std::isfinite(v) && std::fabs(v) < 9.2e18 ? int64_t(v) : INT64_MAX; break;
    case DType::I32: t.i32()[i] = std::isfinite(v) && std::fabs(v) < 2.1e9 ? int32_t(v) : INT32_MAX; break;
    default: t.u8()[i] = v >= 0 && v < 256 ? uint8_t(v) : uint8_t(255); break;
  }
}

// Applies the edit records to a copy of a base checkpoint.
Arrays edited(const uint8_t* data, size_t size) {
  Arrays a = bases()[data[0] % bases().size()];
  for (size_t at = 1; at + 11 <= size; at += 11) {
    if (a.empty()) break;
    std::vector<std::string> keys;
    for (const auto& kv : a) keys.push_back(kv.first);
    uint16_t k;
    uint32_t index, raw;
    std::memcpy(&k, data + at, 2), std::memcpy(&index, data + at + 3, 4), std::memcpy(&raw, data + at + 7, 4);
    const std::string key = keys[k % keys.size()];
    Tensor t = a[key].clone();
    const int64_t n = t.numel();
    switch (data[at + 2] % 6) {
      case 0: a.erase(key); continue;
      case 1: {
        if (n == 0) break;
        float f;
        std::memcpy(&f, &raw, 4);
        set_element(t, int64_t(index % uint64_t(n)), t.dtype() == DType::F32 || t.dtype() == DType::F64
                                                         ? double(f)
                                                         : double(int32_t(raw)));
        break;
      }
      case 2: {
        const DType to[] = {DType::F32, DType::F64, DType::I64, DType::I32, DType::U8};
        if (t.dtype() == DType::Bool) break;
        const DType want = to[index % 5];
        if ((t.dtype() == DType::F32 || t.dtype() == DType::F64) && want != DType::F32 && want != DType::F64) {
          Tensor d = t.astype(DType::F64).clone();  // (a float past the integer's range becomes 0, not UB)
          for (int64_t i = 0; i < n; ++i)
            if (!(want == DType::U8 ? d.f64()[i] >= 0 && d.f64()[i] < 256 : std::fabs(d.f64()[i]) < 2e9)) d.f64()[i] = 0;
          t = d;
        }
        t = t.astype(want);
        break;
      }
      case 3:
        if (index % 3 == 0) t = t.reshape({n});
        else if (index % 3 == 1) t = t.reshape({1, n});
        else if (n > 0) t = t.reshape({n}).slice(0, n - 1).clone();
        break;
      case 4: t = a[keys[index % keys.size()]].clone(); break;
      case 5: {
        if (n == 0) break;
        const double special[] = {NAN, INFINITY, -INFINITY, -1, 0, 9.2233720368547758e18, 1e300};
        set_element(t, int64_t(raw % uint64_t(n)), special[index % 7]);
        break;
      }
    }
    a[key] = t;
  }
  return a;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::string path = [] {
    char shm[] = "/dev/shm/gnn_fuzz_checkpoint_XXXXXX", tmp[] = "/tmp/gnn_fuzz_checkpoint_XXXXXX";
    char* dir = ::mkdtemp(shm) ? shm : ::mkdtemp(tmp);  // (memory, where one exists: a write syncs each run)
    if (dir == nullptr) __builtin_trap();
    static std::string made = dir;
    std::atexit([] { std::filesystem::remove_all(made); });
    return made + "/model.npz";
  }();
  static const int64_t unused = host_set_limit(int64_t(256) << 20);  // a checkpoint asking for more is refused
  (void)unused;
  if (size == 0) return 0;
  if (data[0] >= 0x80 || bases().empty()) {
    FILE* f = std::fopen(path.c_str(), "wb");
    if (!f || std::fwrite(data + 1, 1, size - 1, f) != size - 1 || std::fclose(f) != 0) __builtin_trap();
  } else {
    const Arrays a = edited(data, size);
    save_npz(path, {a.begin(), a.end()});
  }
  try {
    train::Meta m = train::read_meta(path);
    if (!train::check_hparams(m.recipe->hparams, m.hparams, m.recipe->name).empty()) return 0;
    const train::TrainHParams tp = train::TrainHParams::read(m.hparams, m.recipe->kind == "layout");
    Rng rng(1);
    auto model = m.recipe->build(m.hparams, train::dims_of(m.prep), rng);
    const std::vector<nn::NamedParam> params = model->parameters();
    nn::Adam opt(nn::one_group(params, tp.weight_decay), tp.lr, /*decoupled=*/true);
    load_checkpoint(path, params, &opt);
    train::State st;
    st.load(m.arrays, path);
    model->load_state(m.arrays, path);
    if (tp.swa > 0) nn::Swa(tp.swa).load("swa/", m.arrays, params, path, st.epoch);
    // What a resumed run trusts next must hold for anything that loaded.
    for (const nn::NamedParam& p : params) {
      const Tensor v = p.var.value().astype(DType::F64);
      for (int64_t i = 0; i < v.numel(); ++i)
        if (!std::isfinite(v.f64()[i])) __builtin_trap();
    }
    if (st.epoch < 0 || st.batch < 0 || st.step < 0 || st.best_epoch > st.epoch) __builtin_trap();
  } catch (const Error&) {
    // A base checkpoint with no edit is one gnn wrote: refusing it is a false alarm of the checks.
    if (data[0] < 0x80 && size < 12 && !bases().empty()) __builtin_trap();
  }
  return 0;
}
