#include "ucc_team.hpp"

#include <thread>
#include <utility>

#include "ucc_error.hpp"

namespace p2ucc {

namespace {
// How long the destructor keeps progressing a team destruction UCC reports in progress.
constexpr auto kDestroyPatience = std::chrono::seconds(10);
}  // namespace

Team::Team(std::shared_ptr<Context> context, std::shared_ptr<StoreOob> oob, int rank, int size,
           std::chrono::milliseconds timeout)
    : context_(std::move(context)), oob_(std::move(oob)), rank_(rank), size_(size),
      deadline_(std::chrono::steady_clock::now() + timeout) {
  ucc_team_params_t params{};
  params.mask = UCC_TEAM_PARAM_FIELD_EP | UCC_TEAM_PARAM_FIELD_EP_RANGE | UCC_TEAM_PARAM_FIELD_OOB;
  params.ep = static_cast<uint64_t>(rank);
  params.ep_range = UCC_COLLECTIVE_EP_RANGE_CONTIG;
  params.oob = oob_->coll();
  ucc_context_h handle = context_->handle();
  check(ucc_team_create_post(&handle, 1, &params, &team_), "ucc_team_create_post");
}

bool Team::test() {
  if (ready_) return true;
  if (failed_) fail("the UCC team's creation failed earlier");
  context_->progress();
  ucc_status_t status = ucc_team_create_test(team_);
  if (status == UCC_OK) {
    ready_ = true;
    return true;
  }
  if (status != UCC_INPROGRESS) {
    failed_ = true;
    std::string message = describe("ucc_team_create_test", status);
    if (!oob_->last_error().empty()) message += ": " + oob_->last_error();
    fail(message);
  }
  if (std::chrono::steady_clock::now() > deadline_) {
    fail("ucc_team_create_test: the team of " + std::to_string(size_) +
         " was not complete within the timeout (a member did not join)");
  }
  return false;
}

void Team::wait() {
  int idle = 0;
  while (!test()) {
    // The store round trips dominate; do not spin a core while waiting for peers.
    if (++idle > 100) std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
}

Team::~Team() {
  if (team_ == nullptr || !(ready_ || failed_)) return;
  const auto give_up = std::chrono::steady_clock::now() + kDestroyPatience;
  while (ucc_team_destroy(team_) == UCC_INPROGRESS) {
    if (std::chrono::steady_clock::now() > give_up) return;   // leaked rather than hung
    context_->progress();
  }
}

}  // namespace p2ucc
