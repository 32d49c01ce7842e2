// tests/dist/test_store.cpp: the rendezvous store (dist/store.h) between the 2 ranks of the
// suite: rank 0 serves on a free port (sent to rank 1 over the world group), both set, get,
// add and wait; a get parked until the other rank sets its key; the errors of a missing key,
// an unreachable server and a bad port name the key, the address and the timeout.
#include <doctest/doctest.h>

#include <memory>
#include <string>
#include <vector>

#include "dist/process_group.h"
#include "dist/store.h"
#include "engine/functions.h"
#include "tests/test_util.h"

using namespace brisk;
using brisk::test::error_text;

namespace {

std::vector<char> bytes(const std::string& s) { return {s.begin(), s.end()}; }
std::string text(const std::vector<char>& v) { return {v.begin(), v.end()}; }

// A store served by rank 0 on a port it picks, joined by every rank.
std::unique_ptr<dist::TcpStore> make_store(dist::Duration timeout) {
  dist::ProcessGroupPtr g = dist::world();
  std::unique_ptr<dist::TcpStore> s;
  Tensor port = zeros({1}, DType::I64);
  if (g->rank() == 0) {
    s = std::make_unique<dist::TcpStore>("127.0.0.1", 0, true, timeout);
    port.fill_(double(s->port()));
  }
  g->broadcast(port, 0)->wait();
  if (g->rank() != 0) s = std::make_unique<dist::TcpStore>("127.0.0.1", int(port.item<int64_t>()), false, timeout);
  return s;
}

}  // namespace

TEST_CASE("store: set, get, add and wait between the ranks") {
  dist::ProcessGroupPtr g = dist::world();
  const int me = g->rank(), n = g->size();
  auto store = make_store(std::chrono::seconds(20));
  REQUIRE(store->port() > 0);
  // Rank 1 asks first for a key rank 0 sets only after the barrier: the get is parked.
  if (me == 1) {
    CHECK(!store->check({"late"}));
    g->barrier()->wait();
    CHECK(text(store->get("late")) == "from rank 0");
  } else {
    g->barrier()->wait();
    store->set("late", bytes("from rank 0"));
  }
  store->set("rank" + std::to_string(me), bytes(std::string(size_t(1000 * (me + 1)), char('a' + me))));
  store->wait({"rank0", "rank1"}, std::chrono::seconds(20));
  CHECK(store->check({"rank0", "rank1"}));
  CHECK(text(store->get("rank1")) == std::string(2000, 'b'));
  CHECK(store->get("rank0").size() == 1000);
  const int64_t mine = store->add("counter", me + 1);
  CHECK((mine == me + 1 || mine == 3));
  g->barrier()->wait();
  CHECK(store->add("counter", 0) == n * (n + 1) / 2);
  g->barrier()->wait();  // rank 0's server stays up until both are done
}

TEST_CASE("store: a key nobody sets, an unreachable server and a bad port are clear errors") {
  dist::ProcessGroupPtr g = dist::world();
  auto store = make_store(std::chrono::seconds(20));
  const std::string missing = error_text([&] { store->wait({"never"}, std::chrono::milliseconds(300)); });
  CHECK(missing.find("get of key 'never'") != std::string::npos);
  CHECK(missing.find("timed out after 0.3") != std::string::npos);
  // The store still works after a timed-out request (it reconnects).
  store->set("after" + std::to_string(g->rank()), bytes("x"));
  CHECK(text(store->get("after" + std::to_string(g->rank()))) == "x");
  g->barrier()->wait();
  // Port 1 on this host: nobody listens there.
  const std::string unreachable =
      error_text([] { dist::TcpStore("127.0.0.1", 1, false, std::chrono::milliseconds(200)); });
  CHECK(unreachable.find("cannot reach the rendezvous server at 127.0.0.1:1") != std::string::npos);
  CHECK(error_text([] {
          dist::TcpStore("127.0.0.1", 70000, false, std::chrono::seconds(1));
        }).find("port 70000 is not a TCP port") != std::string::npos);
  if (g->rank() == 0) {  // a second server on the first one's port
    const std::string taken =
        error_text([&] { dist::TcpStore("127.0.0.1", store->port(), true, std::chrono::seconds(1)); });
    CHECK(taken.find("cannot listen on port " + std::to_string(store->port())) != std::string::npos);
  }
  g->barrier()->wait();
}
