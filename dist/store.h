// dist/store.h: the rendezvous store of launches without mpirun (torchrun's TCPStore pattern):
// a small key-value server that one process (rank 0 of the job) runs on MASTER_ADDR:MASTER_PORT,
// and a client in every process that sets keys, waits for keys the others set, and adds to
// counters. Process groups exchange their addresses through it (Gloo's full mesh, NCCL's unique
// id); the collectives themselves never go through it. Every wait has a timeout that ends in a
// brisk::Error naming the key and the server. Not here: the process groups (dist/gloo_group.cpp),
// reading the environment (dist::init_from_env in dist/process_group.h). It needs nothing of
// brisk but the header engine/error.h: the launcher brisk-run (dist/run/brisk_run.cpp) compiles
// it in for its agents' store (Note [Agents across hosts] there).
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "engine/error.h"

namespace brisk::dist {

using Duration = std::chrono::milliseconds;  // as dist/process_group.h declares it

class TcpStore {
 public:
  // is_server: this process listens on `port` (all addresses; 0 picks a free port, see port())
  // and serves the job; every process, the server's included, connects to host:port as a
  // client, retrying until `timeout` (the server may start later than its clients).
  TcpStore(std::string host, int port, bool is_server, Duration timeout);
  ~TcpStore();
  TcpStore(const TcpStore&) = delete;
  TcpStore& operator=(const TcpStore&) = delete;

  void set(const std::string& key, const std::vector<char>& value);
  // Waits until `key` is set (up to the store's timeout), then returns its value.
  std::vector<char> get(const std::string& key);
  // Adds `delta` to the counter `key` (0 when unset) and returns the new value.
  int64_t add(const std::string& key, int64_t delta);
  // Waits until every key is set; past `timeout` an error names the keys still missing.
  void wait(const std::vector<std::string>& keys, Duration timeout);
  bool check(const std::vector<std::string>& keys);  // whether every key is set now

  int port() const { return port_; }
  const std::string& host() const { return host_; }
  Duration timeout() const { return timeout_; }
  void set_timeout(Duration timeout) { timeout_ = timeout; }

  struct Server;  // dist/store.cpp

 private:
  // One request, its reply awaited until `deadline`; `timeout` is what a timeout error reports.
  std::vector<char> request(char op, const std::string& key, const std::vector<char>& value,
                            std::chrono::steady_clock::time_point deadline, Duration timeout);
  std::vector<char> request(char op, const std::string& key, const std::vector<char>& value);

  std::string host_;
  int port_ = 0;
  Duration timeout_;
  int fd_ = -1;
  std::mutex mu_;  // one request at a time on the connection
  std::unique_ptr<Server> server_;
};

}  // namespace brisk::dist
