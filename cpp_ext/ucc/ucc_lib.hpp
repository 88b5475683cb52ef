// The UCC library handle (ucc_init / ucc_finalize), RAII.
//
// Each Lib reads its configuration under its own environment prefix
// ("P2UCC<n>", unique in the process), so what one Lib's contexts are told
// through the environment (Context's NIC binding) reaches no other Lib's.
// Thread mode FUNNELED: every call on a Lib and the objects made from it comes
// from one thread at a time (the backend makes, uses and destroys them all on
// its progress thread).
#pragma once

#include <memory>
#include <string>

#include <ucc/api/ucc.h>

namespace p2ucc {

class Lib {
 public:
  Lib();
  ~Lib();
  Lib(const Lib&) = delete;
  Lib& operator=(const Lib&) = delete;

  ucc_lib_h handle() const { return lib_; }
  // The prefix of the environment variables this Lib's configuration reads
  // (without the trailing "_UCC_").
  const std::string& env_prefix() const { return env_prefix_; }

  // UCC's version, e.g. "1.3.0 (revision ...)".
  static std::string version();

 private:
  ucc_lib_h lib_ = nullptr;
  std::string env_prefix_;
};

}  // namespace p2ucc
