// dist/store.cpp: TcpStore, the rendezvous key-value store (dist/store.h): a poll() loop on one
// thread of the serving process, and a blocking client with deadlines. Wire format, both ways:
// a request is op (1 byte), key length (u32), key, value length (u64), value; a reply is a
// status byte (0: ok) and a length-prefixed value. A get of a key not yet set is parked on the
// server until some client sets it. Not here: what the keys mean (dist/gloo_group.cpp).
#include "dist/store.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <map>
#include <mutex>
#include <sstream>
#include <thread>

namespace brisk::dist {

namespace {

using Clock = std::chrono::steady_clock;
constexpr char kSet = 'S', kGet = 'G', kAdd = 'A', kCheck = 'C';
constexpr uint64_t kMaxValue = uint64_t(1) << 30;  // a rendezvous value is small; more is a bad peer

std::string errno_text() { return std::strerror(errno); }

void put_u32(std::vector<char>& b, uint32_t v) {
  b.insert(b.end(), reinterpret_cast<char*>(&v), reinterpret_cast<char*>(&v) + 4);
}
void put_u64(std::vector<char>& b, uint64_t v) {
  b.insert(b.end(), reinterpret_cast<char*>(&v), reinterpret_cast<char*>(&v) + 8);
}

// Writes all of `data` (blocking socket); false when the peer is gone.
bool write_all(int fd, const char* data, size_t n) {
  while (n > 0) {
    const ssize_t k = ::send(fd, data, n, MSG_NOSIGNAL);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) return false;
    data += k;
    n -= size_t(k);
  }
  return true;
}

// Reads exactly n bytes before `deadline`: "" on success, else why not.
std::string read_all(int fd, char* data, size_t n, Clock::time_point deadline) {
  while (n > 0) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
    if (left <= 0) return "timeout";
    pollfd p{fd, POLLIN, 0};
    const int r = ::poll(&p, 1, int(std::min<int64_t>(left, 1000)));
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) return errno_text();
    if (r == 0) continue;
    const ssize_t k = ::recv(fd, data, n, 0);
    if (k < 0 && (errno == EINTR || errno == EAGAIN)) continue;
    if (k == 0) return "the server closed the connection";
    if (k < 0) return errno_text();
    data += k;
    n -= size_t(k);
  }
  return "";
}

std::vector<char> reply(const std::vector<char>& value) {
  std::vector<char> b{0};
  put_u64(b, value.size());
  b.insert(b.end(), value.begin(), value.end());
  return b;
}

}  // namespace

// ---- the server: one thread, poll() over the listening socket, a wake-up pipe and the clients.
struct TcpStore::Server {
  struct Client {
    int fd;
    std::vector<char> in;  // bytes received, not yet a whole request
  };
  int listen_fd = -1;
  int wake[2] = {-1, -1};
  std::thread thread;
  std::map<std::string, std::vector<char>> data;
  std::multimap<std::string, int> waiting;  // key -> client fd parked in a get
  std::map<int, Client> clients;

  explicit Server(int& port) {
    // Dual-stack where the host has IPv6 (IPv4 clients too), else IPv4 alone.
    int rc = bind_to(AF_INET6, port);
    if (rc != 0 && errno != EADDRINUSE) rc = bind_to(AF_INET, port);
    if (rc != 0) {
      const std::string why = errno_text();
      if (listen_fd >= 0) ::close(listen_fd);
      BRISK_FAIL("TcpStore: cannot listen on port ", port, ": ", why,
                 " (another job on this MASTER_PORT? pick another with --master-port or MASTER_PORT)");
    }
    BRISK_CHECK(::listen(listen_fd, 1024) == 0, "TcpStore: listen() on port ", port, " failed: ", errno_text());
    sockaddr_storage got{};
    socklen_t len = sizeof got;
    ::getsockname(listen_fd, reinterpret_cast<sockaddr*>(&got), &len);
    port = ntohs(got.ss_family == AF_INET6 ? reinterpret_cast<sockaddr_in6*>(&got)->sin6_port
                                           : reinterpret_cast<sockaddr_in*>(&got)->sin_port);
    BRISK_CHECK(::pipe2(wake, O_CLOEXEC) == 0, "TcpStore: pipe() failed: ", errno_text());
    thread = std::thread([this] { loop(); });
  }

  // A listening socket of `family` on `port` in listen_fd; bind's result (errno set on failure).
  int bind_to(int family, int port) {
    if (listen_fd >= 0) ::close(listen_fd);
    listen_fd = ::socket(family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (listen_fd < 0) return -1;
    const int one = 1, zero = 0;
    ::setsockopt(listen_fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);  // a restarted job reuses its port
    if (family == AF_INET6) {
      ::setsockopt(listen_fd, IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof zero);
      sockaddr_in6 a{};
      a.sin6_family = AF_INET6;
      a.sin6_addr = in6addr_any;
      a.sin6_port = htons(uint16_t(port));
      return ::bind(listen_fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
    }
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_ANY);
    a.sin_port = htons(uint16_t(port));
    return ::bind(listen_fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
  }

  ~Server() {
    const char c = 'x';
    [[maybe_unused]] const ssize_t k = ::write(wake[1], &c, 1);
    if (thread.joinable()) thread.join();
    for (auto& [fd, c2] : clients) ::close(fd);
    ::close(listen_fd);
    ::close(wake[0]);
    ::close(wake[1]);
  }

  void drop(int fd) {
    for (auto it = waiting.begin(); it != waiting.end();) it = it->second == fd ? waiting.erase(it) : std::next(it);
    clients.erase(fd);
    ::close(fd);
  }

  // Handles every whole request in the client's buffer; false when the client must be dropped.
  bool serve(Client& c) {
    while (true) {
      if (c.in.size() < 1 + 4) return true;
      uint32_t klen;
      std::memcpy(&klen, c.in.data() + 1, 4);
      if (klen > kMaxValue) return false;
      if (c.in.size() < 1 + 4 + klen + 8) return true;
      uint64_t vlen;
      std::memcpy(&vlen, c.in.data() + 5 + klen, 8);
      if (vlen > kMaxValue) return false;
      const size_t total = 1 + 4 + klen + 8 + vlen;
      if (c.in.size() < total) return true;
      const char op = c.in[0];
      std::string key(c.in.data() + 5, klen);
      std::vector<char> value(c.in.begin() + long(5 + klen + 8), c.in.begin() + long(total));
      c.in.erase(c.in.begin(), c.in.begin() + long(total));
      if (!handle(c.fd, op, key, std::move(value))) return false;
    }
  }

  bool handle(int fd, char op, const std::string& key, std::vector<char> value) {
    switch (op) {
      case kSet: {
        data[key] = std::move(value);
        if (!send_reply(fd, {})) return false;
        wake_waiters(key);
        return true;
      }
      case kGet: {
        auto it = data.find(key);
        if (it == data.end()) {
          waiting.emplace(key, fd);
          return true;
        }
        return send_reply(fd, it->second);
      }
      case kAdd: {
        int64_t delta = 0, now = 0;
        if (value.size() != 8) return false;
        std::memcpy(&delta, value.data(), 8);
        auto it = data.find(key);
        if (it != data.end() && it->second.size() == 8) std::memcpy(&now, it->second.data(), 8);
        now += delta;
        std::vector<char> v(8);
        std::memcpy(v.data(), &now, 8);
        data[key] = v;
        if (!send_reply(fd, v)) return false;
        wake_waiters(key);
        return true;
      }
      case kCheck: return send_reply(fd, {char(data.count(key) ? 1 : 0)});
      default: return false;
    }
  }

  bool send_reply(int fd, const std::vector<char>& v) {
    const std::vector<char> b = reply(v);
    return write_all(fd, b.data(), b.size());
  }

  void wake_waiters(const std::string& key) {
    auto [lo, hi] = waiting.equal_range(key);
    std::vector<int> fds;
    for (auto it = lo; it != hi; ++it) fds.push_back(it->second);
    waiting.erase(lo, hi);
    for (int fd : fds) {
      if (!send_reply(fd, data[key])) drop(fd);
    }
  }

  void loop() {
    while (true) {
      std::vector<pollfd> fds{{wake[0], POLLIN, 0}, {listen_fd, POLLIN, 0}};
      for (auto& [fd, c] : clients) fds.push_back({fd, POLLIN, 0});
      if (::poll(fds.data(), fds.size(), -1) < 0) {
        if (errno == EINTR) continue;
        return;
      }
      if (fds[0].revents) return;
      if (fds[1].revents & POLLIN) {
        const int fd = ::accept4(listen_fd, nullptr, nullptr, SOCK_CLOEXEC);
        if (fd >= 0) {
          const int one = 1;
          ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
          clients[fd] = Client{fd, {}};
        }
      }
      for (size_t i = 2; i < fds.size(); ++i) {
        if (!fds[i].revents) continue;
        auto it = clients.find(fds[i].fd);
        if (it == clients.end()) continue;
        char buf[65536];
        const ssize_t k = ::recv(fds[i].fd, buf, sizeof buf, 0);
        if (k <= 0) {
          if (k < 0 && (errno == EINTR || errno == EAGAIN)) continue;
          drop(fds[i].fd);
          continue;
        }
        it->second.in.insert(it->second.in.end(), buf, buf + k);
        if (!serve(it->second)) drop(fds[i].fd);
      }
    }
  }
};

namespace {

// Connects to host:port, retrying until the deadline (the server may not be up yet).
int connect_to(const std::string& host, int port, Clock::time_point deadline, Duration timeout) {
  std::string last = "no attempt";
  while (true) {
    addrinfo hints{};
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    addrinfo* res = nullptr;
    const int g = ::getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &res);
    if (g != 0) {
      last = std::string("cannot resolve the address: ") + gai_strerror(g);
    } else {
      for (addrinfo* a = res; a; a = a->ai_next) {
        const int fd = ::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
        if (fd < 0) continue;
        if (::connect(fd, a->ai_addr, a->ai_addrlen) == 0) {
          ::freeaddrinfo(res);
          const int one = 1;
          ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
          return fd;
        }
        last = errno_text();
        ::close(fd);
      }
      ::freeaddrinfo(res);
    }
    if (Clock::now() >= deadline) {
      BRISK_FAIL("TcpStore: cannot reach the rendezvous server at ", host, ":", port, " within ",
                 std::chrono::duration<double>(timeout).count(), " s (", last,
                 "; is rank 0 running, and are MASTER_ADDR and MASTER_PORT the same on every rank?)");
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
}

}  // namespace

TcpStore::TcpStore(std::string host, int port, bool is_server, Duration timeout)
    : host_(std::move(host)), port_(port), timeout_(timeout) {
  BRISK_CHECK(port >= 0 && port < 65536, "TcpStore: port ", port, " is not a TCP port (0-65535)");
  BRISK_CHECK(is_server || port > 0, "TcpStore: a client needs the server's port, got 0");
  if (is_server) server_ = std::make_unique<Server>(port_);
  fd_ = connect_to(is_server ? "127.0.0.1" : host_, port_, Clock::now() + timeout_, timeout_);
}

TcpStore::~TcpStore() {
  if (fd_ >= 0) ::close(fd_);
  server_.reset();
}

std::vector<char> TcpStore::request(char op, const std::string& key, const std::vector<char>& value) {
  return request(op, key, value, Clock::now() + timeout_, timeout_);
}

std::vector<char> TcpStore::request(char op, const std::string& key, const std::vector<char>& value,
                                    Clock::time_point deadline, Duration timeout) {
  std::lock_guard<std::mutex> lock(mu_);
  if (fd_ < 0) fd_ = connect_to(server_ ? "127.0.0.1" : host_, port_, deadline, timeout);
  std::vector<char> b{op};
  put_u32(b, uint32_t(key.size()));
  b.insert(b.end(), key.begin(), key.end());
  put_u64(b, value.size());
  b.insert(b.end(), value.begin(), value.end());
  const char* what = op == kSet ? "set" : op == kGet ? "get" : op == kAdd ? "add" : "check";
  auto fail = [&](const std::string& why) {
    ::close(fd_);  // the reply may still come: this connection is out of step now
    fd_ = -1;
    BRISK_FAIL("TcpStore: ", what, " of key '", key, "' at ", host_, ":", port_, " failed: ", why);
  };
  if (!write_all(fd_, b.data(), b.size())) fail("the server closed the connection (did rank 0 exit?)");
  char head[9];
  std::string err = read_all(fd_, head, 9, deadline);
  if (err == "timeout") {
    std::ostringstream s;
    s << "timed out after " << std::chrono::duration<double>(timeout).count()
      << " s (a rank did not arrive: it died, hangs, or was started with another WORLD_SIZE)";
    fail(s.str());
  }
  if (!err.empty()) fail(err);
  uint64_t len;
  std::memcpy(&len, head + 1, 8);
  if (head[0] != 0 || len > kMaxValue) fail("a malformed reply");
  std::vector<char> v(len);
  err = read_all(fd_, v.data(), len, deadline);
  if (!err.empty()) fail(err);
  return v;
}

void TcpStore::set(const std::string& key, const std::vector<char>& value) { request(kSet, key, value); }

std::vector<char> TcpStore::get(const std::string& key) { return request(kGet, key, {}); }

int64_t TcpStore::add(const std::string& key, int64_t delta) {
  std::vector<char> v(8);
  std::memcpy(v.data(), &delta, 8);
  const std::vector<char> r = request(kAdd, key, v);
  int64_t now = 0;
  std::memcpy(&now, r.data(), 8);
  return now;
}

void TcpStore::wait(const std::vector<std::string>& keys, Duration timeout) {
  const auto deadline = Clock::now() + timeout;
  for (const std::string& k : keys) request(kGet, k, {}, deadline, timeout);
}

bool TcpStore::check(const std::vector<std::string>& keys) {
  for (const std::string& k : keys) {
    if (request(kCheck, k, {}).at(0) == 0) return false;
  }
  return true;
}

}  // namespace brisk::dist
