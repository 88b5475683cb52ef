// A UCC context (ucc_context_create / ucc_context_destroy), RAII, and how it
// is bound to one network interface.
//
// With a StoreOob the context is created collectively: UCC all-gathers the
// members' addresses through it (and, at destruction, runs a one-byte
// all-gather as a barrier before closing its endpoints). Without one it is a
// local context; teams made on it exchange addresses at team creation.
//
// NIC binding. UCC 1.3.0's TL/UCP creates its UCX context from
// ucp_config_read(<lib prefix>_UCC, ...), i.e. from the environment variables
// <lib prefix>_UCC_UCX_*; neither ucc_context_config_modify nor any other
// UCC parameter reaches UCX's NET_DEVICES or TLS. Each Lib has a prefix of its
// own (ucc_lib.hpp), so Context sets <lib prefix>_UCC_UCX_NET_DEVICES (and
// _TLS) only for the duration of its own ucc_context_create, under a lock
// shared by every Context, and removes them afterwards: the setting binds
// this context alone, never another context or another library in the
// process (UCX_NET_DEVICES itself is never touched).
#pragma once

#include <memory>
#include <string>

#include <ucc/api/ucc.h>

#include "store_oob.hpp"
#include "ucc_lib.hpp"

namespace p2ucc {

struct ContextOptions {
  // UCX NET_DEVICES for this context, e.g. "eth1" or "mlx5_0:1" ("": UCX's choice).
  std::string net_devices;
  // UCX TLS for this context, e.g. "tcp" ("": UCX's choice, which prefers
  // shared memory between processes of one host over any NIC).
  std::string transports;
};

class Context {
 public:
  Context(std::shared_ptr<Lib> lib, std::shared_ptr<StoreOob> oob, ContextOptions options);
  ~Context();
  Context(const Context&) = delete;
  Context& operator=(const Context&) = delete;

  ucc_context_h handle() const { return context_; }
  // One ucc_context_progress call; its status (UCC_OK, or an error).
  ucc_status_t progress();
  // The OOB the context was created with (nullptr for a local context).
  StoreOob* oob() const { return oob_.get(); }
  const std::shared_ptr<Lib>& lib() const { return lib_; }
  const ContextOptions& options() const { return options_; }

 private:
  std::shared_ptr<Lib> lib_;
  std::shared_ptr<StoreOob> oob_;
  ContextOptions options_;
  ucc_context_h context_ = nullptr;
};

}  // namespace p2ucc
