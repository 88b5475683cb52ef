// One collective on a team (ucc_collective_init / _post / _test / _finalize), RAII.
//
// The constructor initialises the request (every member must construct its
// requests of a team in the same order), post() starts it, test() says where
// it is — UCC_INPROGRESS, UCC_OK (the Collective's local finish step has then
// run, once) or an error — and the destructor finalises it. A request that is
// still in progress when it is destroyed is not finalised (UCC may still write
// into its buffers): it is leaked together with its buffers and its team,
// never freed under UCC's feet. Callers progress the team's context between tests.
// A Collective with nothing to do never reaches UCC and completes on post().
#pragma once

#include <memory>

#include <ucc/api/ucc.h>

#include "ucc_collective.hpp"
#include "ucc_team.hpp"

namespace p2ucc {

class Request {
 public:
  // timeout_seconds > 0: UCC itself fails the collective with UCC_ERR_TIMED_OUT
  // once it has been in progress that long.
  Request(std::shared_ptr<Team> team, Collective collective, double timeout_seconds);
  ~Request();
  Request(const Request&) = delete;
  Request& operator=(const Request&) = delete;

  void post();
  ucc_status_t test();
  // ucc_collective_finalize now (refused while in progress); the destructor does it otherwise.
  void finalize();
  const std::string& name() const { return collective_->name; }
  const std::shared_ptr<Team>& team() const { return team_; }

 private:
  std::shared_ptr<Team> team_;
  std::unique_ptr<Collective> collective_;
  ucc_coll_req_h request_ = nullptr;
  ucc_status_t status_ = UCC_OPERATION_INITIALIZED;
  bool posted_ = false;
};

}  // namespace p2ucc
