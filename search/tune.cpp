// search/tune.cpp: run() (the Runner: worker threads, the waits that make parallel results the
// same as sequential ones, the journal that makes a search resumable) and Result (table, CSV,
// JSON). The searchers and schedulers are in search/tune_search.cpp, the space in
// search/tune_space.cpp.
#include "search/tune.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <fstream>
#include <mutex>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <thread>

#include "engine/error.h"
#include "engine/serialize.h"
#include "engine/threads.h"

namespace brisk::tune {

using Json = nlohmann::ordered_json;

namespace {

constexpr uint64_t kSeedStream = uint64_t(1) << 62;  // trial seeds; proposals use stream = id

bool better(double a, double b, Mode mode) {
  if (std::isnan(a)) return false;
  if (std::isnan(b)) return true;
  return mode == Mode::Max ? a > b : a < b;
}

Json value_json(const Value& v) {
  if (const double* d = std::get_if<double>(&v)) return *d;
  if (const int64_t* i = std::get_if<int64_t>(&v)) return *i;
  return std::get<std::string>(v);
}

Json record_json(const TrialRecord& r) {
  Json config = Json::object();
  for (const auto& [k, v] : r.config.values()) config[k] = value_json(v);
  Json curve = Json::array();
  for (const Point& p : r.curve) curve.push_back(Json::array({p.step, p.metric}));  // NaN -> null
  Json j = {{"id", r.id},
            {"seed", r.seed},
            {"status", status_name(r.status)},
            {"score", r.score()},
            {"resource", r.resource()},
            {"seconds", r.seconds},
            {"config", config},
            {"curve", curve}};
  if (!r.error.empty()) j["error"] = r.error;
  return j;
}

TrialRecord record_from_json(const Json& j) {
  TrialRecord r;
  r.id = j.at("id").get<int64_t>();
  r.seed = j.at("seed").get<uint64_t>();
  const std::string st = j.at("status").get<std::string>();
  r.status = st == "completed" ? Status::Completed : st == "stopped" ? Status::Stopped : Status::Failed;
  BRISK_CHECK(st == "completed" || st == "stopped" || st == "failed", "unknown status '", st, "'");
  for (const auto& [k, v] : j.at("config").items()) {
    if (v.is_string())
      r.config.set(k, v.get<std::string>());
    else if (v.is_number_integer())
      r.config.set(k, v.get<int64_t>());
    else
      r.config.set(k, v.get<double>());
  }
  for (const Json& p : j.at("curve"))
    r.curve.push_back({p.at(0).get<int64_t>(), p.at(1).is_null() ? NAN : p.at(1).get<double>()});
  if (j.contains("error")) r.error = j.at("error").get<std::string>();
  r.seconds = j.value("seconds", 0.0);
  return r;
}

std::string fingerprint(const Space& space, const Options& o) {
  std::ostringstream s;
  s << space.describe() << "searcher " << o.searcher->describe() << "\nscheduler "
    << (o.scheduler ? o.scheduler->describe() : "none") << "\nseed " << o.seed << "\nmode "
    << (o.mode == Mode::Max ? "max" : "min");
  return s.str();
}

}  // namespace

const char* status_name(Status s) {
  switch (s) {
    case Status::Completed: return "completed";
    case Status::Stopped: return "stopped";
    case Status::Failed: return "failed";
  }
  return "?";
}

double TrialRecord::score() const { return curve.empty() ? NAN : curve.back().metric; }
int64_t TrialRecord::resource() const { return curve.empty() ? 0 : curve.back().step; }

uint64_t trial_seed(uint64_t search_seed, int64_t id) {
  const Philox4 r = philox(search_seed, uint64_t(id), kSeedStream);
  return uint64_t(r.v[0]) | (uint64_t(r.v[1]) << 32);
}

// ---- the Runner ----

// Note [Deterministic parallel trials]
// Trial ids are handed out in order. Trial k's configuration is proposed from trials
// 0 .. k - parallel only, and only once all of those have finished (with one trial at a time:
// from every earlier trial). A scheduler's decision at trial k's step s is taken from the
// curves of trials 0 .. k - 1 truncated at step s, once each of them has reported a step >= s or
// ended. Both are what a sequential run sees, so results depend on the seed and `parallel`,
// never on timing; with no history-driven searcher (grid, random) they do not depend on
// `parallel` either. Waits point from a larger id to smaller ones, and the smallest unfinished
// trial never waits, so they cannot deadlock. A resumed search reruns exactly the ids missing
// from the journal, each proposed from the same finished trials as before.
class Runner {
 public:
  Runner(const Space& space, const TrialFn& fn, const Options& o) : space_(space), fn_(fn), o_(o) {
    BRISK_CHECK(o.max_trials >= 0, "tune: max_trials must be >= 0, got ", o.max_trials);
    BRISK_CHECK(o.parallel >= 1, "tune: parallel must be >= 1, got ", o.parallel);
    BRISK_CHECK(o.threads_per_trial >= 0, "tune: threads_per_trial must be >= 0, got ", o.threads_per_trial);
    BRISK_CHECK(!(o.max_budget < 0), "tune: max_budget must be >= 0, got ", o.max_budget);
    BRISK_CHECK(fn_ != nullptr, "tune: run needs a trial function");
    BRISK_CHECK(!space.params().empty(), "tune: the space has no parameters");
    if (!o_.searcher) o_.searcher = std::make_shared<RandomSearch>();
    limit_ = o.max_trials;
    threads_ = o.threads_per_trial > 0 ? o.threads_per_trial : get_num_threads();
    if (!o_.journal.empty()) open_journal();
  }
  ~Runner() {
    if (journal_) std::fclose(journal_);
  }

  Result run() {
    std::vector<std::thread> workers;
    const int n = int(std::min<int64_t>(o_.parallel, std::max<int64_t>(o_.max_trials, 1)));
    for (int i = 0; i < n; ++i) workers.emplace_back([this] { worker(); });
    for (std::thread& w : workers) w.join();
    if (fatal_) std::rethrow_exception(fatal_);
    if (interrupted_) throw Interrupt();
    Result r;
    r.mode = o_.mode;
    r.resumed = resumed_;
    for (const Param& p : space_.params()) r.params.push_back(p.name);
    for (auto& [id, rec] : done_) r.trials.push_back(rec);
    return r;
  }

  bool report(Trial& t, int64_t step, double metric) {
    std::unique_lock lk(mu_);
    if (interrupted_) throw Interrupt();
    if (t.stopped_) return false;
    std::vector<Point>& mine = live_.at(t.id());
    BRISK_CHECK(mine.empty() || step > mine.back().step, "tune: trial ", t.id(), " reported step ", step,
                " after step ", mine.back().step, " (steps must increase)");
    mine.push_back({step, metric});
    cv_.notify_all();
    if (!o_.scheduler) return true;
    const int64_t id = t.id();
    cv_.wait(lk, [&] {
      if (interrupted_) return true;
      for (int64_t j = 0; j < id; ++j) {
        if (ended(j)) continue;
        auto it = live_.find(j);
        if (it == live_.end() || it->second.empty() || it->second.back().step < step) return false;
      }
      return true;
    });
    if (interrupted_) throw Interrupt();
    std::vector<std::vector<Point>> earlier;
    for (int64_t j = 0; j < id; ++j) {
      const std::vector<Point>* c = nullptr;
      if (auto d = done_.find(j); d != done_.end())
        c = &d->second.curve;
      else if (auto l = live_.find(j); l != live_.end())
        c = &l->second;
      if (!c) continue;
      std::vector<Point> cut;
      for (const Point& p : *c)
        if (p.step <= step) cut.push_back(p);
      earlier.push_back(std::move(cut));
    }
    if (o_.scheduler->should_stop(live_.at(id), earlier, o_.mode)) t.stopped_ = true;
    return !t.stopped_;
  }

 private:
  bool ended(int64_t j) const { return done_.count(j) != 0 || j >= limit_; }

  void worker() {
    try {
      set_num_threads(threads_);  // this thread's OpenMP setting only (docs/TUNE.md)
      std::unique_lock lk(mu_);
      while (!interrupted_ && next_id_ < limit_) {
        const int64_t id = next_id_++;
        if (done_.count(id)) continue;  // read back from the journal
        live_[id];
        const int64_t last_seen = id - o_.parallel;  // the history: trials 0 .. id - parallel
        cv_.wait(lk, [&] {
          if (interrupted_) return true;
          for (int64_t j = 0; j <= last_seen; ++j)
            if (!ended(j)) return false;
          return true;
        });
        std::vector<Observation> history;
        double used = 0;
        for (auto& [j, rec] : done_) {
          if (j > last_seen) break;
          used += double(rec.resource());
          if (rec.status == Status::Failed) continue;
          const double s = rec.score();
          const double loss = std::isnan(s) ? INFINITY : o_.mode == Mode::Max ? -s : s;
          history.push_back({&rec.config, loss});
        }
        std::optional<Config> config;
        if (!interrupted_ && id < limit_ && !(o_.max_budget > 0 && used >= o_.max_budget)) {
          Rng rng(o_.seed, uint64_t(id));
          config = o_.searcher->propose(space_, history, id, rng);
        }
        if (!config) {  // out of budget, grid or time: so is every later id
          live_.erase(id);
          limit_ = std::min(limit_, id);
          cv_.notify_all();
          break;
        }
        space_.check(*config);
        lk.unlock();
        run_trial(id, *config);
        lk.lock();
      }
    } catch (...) {
      std::lock_guard g(mu_);
      if (!fatal_) fatal_ = std::current_exception();
      interrupted_ = true;
      cv_.notify_all();
    }
  }

  void run_trial(int64_t id, const Config& config) {
    Trial t(id, trial_seed(o_.seed, id), config, this);
    TrialRecord rec;
    const auto t0 = std::chrono::steady_clock::now();
    bool interrupt = false;
    try {
      fn_(t);
    } catch (const Interrupt&) {
      interrupt = true;
    } catch (const std::exception& e) {
      rec.status = Status::Failed;
      rec.error = e.what();
    } catch (...) {
      rec.status = Status::Failed;
      rec.error = "unknown exception";
    }
    std::lock_guard g(mu_);
    if (interrupt || interrupted_) {
      interrupted_ = true;
      live_.erase(id);
      cv_.notify_all();
      return;
    }
    rec.id = id;
    rec.seed = t.seed();
    rec.config = config;
    rec.curve = live_.at(id);
    rec.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (rec.status != Status::Failed) {
      if (rec.curve.empty()) {
        rec.status = Status::Failed;
        rec.error = "the trial reported no metric";
      } else {
        rec.status = t.stopped_ ? Status::Stopped : Status::Completed;
      }
    }
    live_.erase(id);
    const TrialRecord& stored = done_[id] = std::move(rec);
    append_journal(stored);
    if (o_.on_trial_end) o_.on_trial_end(stored);
    cv_.notify_all();
  }

  // The journal: a header line with the search's fingerprint, then one JSON line per finished
  // trial, flushed and fsynced as it ends. A torn last line (a kill mid-write) is dropped.
  void open_journal() {
    const std::string fp = fingerprint(space_, o_);
    std::ifstream in(o_.journal);
    if (in) {
      std::vector<std::string> lines;
      for (std::string line; std::getline(in, line);)
        if (!line.empty()) lines.push_back(line);
      in.close();
      bool torn = false;
      for (size_t i = 0; i < lines.size(); ++i) {
        Json j;
        try {
          j = Json::parse(lines[i]);
        } catch (const std::exception&) {
          BRISK_CHECK(i + 1 == lines.size(), "tune: journal ", o_.journal, ": line ", i + 1, " is not JSON");
          torn = true;
          lines.pop_back();
          break;
        }
        if (i == 0) {
          BRISK_CHECK(j.is_object() && j.contains("brisk_tune") && j.contains("fingerprint"), "tune: ", o_.journal,
                      " is not a brisk::tune journal");
          BRISK_CHECK(j["fingerprint"].get<std::string>() == fp, "tune: journal ", o_.journal,
                      " was written by a different search (space, searcher, scheduler, seed or mode differ); "
                      "use another file to start a new search");
          continue;
        }
        try {
          TrialRecord r = record_from_json(j);
          done_[r.id] = std::move(r);
        } catch (const std::exception& e) {
          BRISK_FAIL("tune: journal ", o_.journal, ": line ", i + 1, ": ", e.what());
        }
      }
      resumed_ = int64_t(done_.size());
      if (torn || lines.empty()) {
        std::string text = lines.empty() ? Json({{"brisk_tune", 1}, {"fingerprint", fp}}).dump() + "\n" : "";
        for (const std::string& l : lines) text += l + "\n";
        write_file_atomic(o_.journal, text);
      }
    } else {
      write_file_atomic(o_.journal, Json({{"brisk_tune", 1}, {"fingerprint", fp}}).dump() + "\n");
    }
    journal_ = std::fopen(o_.journal.c_str(), "a");
    BRISK_CHECK(journal_ != nullptr, "tune: cannot open journal ", o_.journal, " for appending");
  }

  void append_journal(const TrialRecord& r) {
    if (!journal_) return;
    const std::string line = record_json(r).dump() + "\n";
    const bool ok =
        std::fputs(line.c_str(), journal_) >= 0 && std::fflush(journal_) == 0 && ::fsync(fileno(journal_)) == 0;
    BRISK_CHECK(ok, "tune: cannot append trial ", r.id, " to journal ", o_.journal);
  }

  const Space& space_;
  const TrialFn& fn_;
  Options o_;
  int threads_ = 1;
  std::mutex mu_;
  std::condition_variable cv_;
  std::map<int64_t, TrialRecord> done_;            // finished, by id (journal ones included)
  std::map<int64_t, std::vector<Point>> live_;     // handed out and not finished: curve so far
  int64_t next_id_ = 0, limit_ = 0, resumed_ = 0;  // ids >= limit_ never run
  bool interrupted_ = false;
  std::exception_ptr fatal_;
  FILE* journal_ = nullptr;
};

bool Trial::report(int64_t step, double metric) { return runner_->report(*this, step, metric); }

Result run(const Space& space, const TrialFn& fn, const Options& options) {
  Runner r(space, fn, options);
  return r.run();
}

// ---- Result ----

const TrialRecord& Result::best() const {
  const TrialRecord* b = nullptr;
  for (const TrialRecord& t : trials) {
    if (t.status == Status::Failed || std::isnan(t.score())) continue;
    if (!b || better(t.score(), b->score(), mode)) b = &t;
  }
  BRISK_CHECK(b != nullptr, "tune: no trial finished with a score (", trials.size(), " trials)");
  return *b;
}

double Result::budget() const {
  double total = 0;
  for (const TrialRecord& t : trials) total += double(t.resource());
  return total;
}

namespace {

std::string value_text(const Config& c, const std::string& name) {
  if (!c.has(name)) return "";
  const Value& v = c.values().at(name);
  char buf[64];
  if (const double* d = std::get_if<double>(&v)) {
    std::snprintf(buf, sizeof buf, "%.6g", *d);
    return buf;
  }
  if (const int64_t* i = std::get_if<int64_t>(&v)) return std::to_string(*i);
  return std::get<std::string>(v);
}

std::string csv_field(const std::string& s) {
  if (s.find_first_of(",\"\n") == std::string::npos) return s;
  std::string out = "\"";
  for (char ch : s) out += ch == '"' ? std::string("\"\"") : std::string(1, ch);
  return out + "\"";
}

std::string number(double x, const char* fmt = "%.6g") {
  char buf[64];
  std::snprintf(buf, sizeof buf, fmt, x);
  return buf;
}

}  // namespace

std::string Result::table(size_t max_rows) const {
  std::vector<const TrialRecord*> order;
  for (const TrialRecord& t : trials) order.push_back(&t);
  std::stable_sort(order.begin(), order.end(), [&](const TrialRecord* a, const TrialRecord* b) {
    const bool fa = a->status == Status::Failed, fb = b->status == Status::Failed;
    if (fa != fb) return fb;
    return better(a->score(), b->score(), mode);
  });
  std::string s = "| rank | trial | status | score | steps | time s |";
  for (const std::string& p : params) {
    s += " ";
    s += p;
    s += " |";
  }
  s += "\n|---|---|---|---|---|---|";
  for (size_t i = 0; i < params.size(); ++i) s += "---|";
  s += "\n";
  for (size_t i = 0; i < order.size() && i < max_rows; ++i) {
    const TrialRecord& t = *order[i];
    s += "| " + std::to_string(i + 1) + " | " + std::to_string(t.id) + " | " + status_name(t.status) + " | " +
         (std::isnan(t.score()) ? std::string("-") : number(t.score(), "%.4f")) + " | " + std::to_string(t.resource()) +
         " | " + number(t.seconds, "%.1f") + " |";
    for (const std::string& p : params) {
      s += " ";
      s += value_text(t.config, p);
      s += " |";
    }
    s += "\n";
  }
  if (order.size() > max_rows) s += "(" + std::to_string(order.size() - max_rows) + " more trials)\n";
  return s;
}

std::string Result::csv() const {
  std::string s = "trial,seed,status,score,resource,seconds";
  for (const std::string& p : params) {
    s += ",";
    s += csv_field(p);
  }
  s += ",error\n";
  for (const TrialRecord& t : trials) {
    s += std::to_string(t.id) + "," + std::to_string(t.seed) + "," + status_name(t.status) + "," +
         (std::isnan(t.score()) ? std::string("") : number(t.score(), "%.17g")) + "," + std::to_string(t.resource()) +
         "," + number(t.seconds, "%.3f");
    for (const std::string& p : params) {
      std::string v;
      if (t.config.has(p)) {
        const Value& x = t.config.values().at(p);
        v = std::holds_alternative<double>(x) ? number(std::get<double>(x), "%.17g") : value_text(t.config, p);
      }
      s += ",";
      s += csv_field(v);
    }
    s += "," + csv_field(t.error) + "\n";
  }
  return s;
}

std::string Result::json() const {
  Json j = {{"mode", mode == Mode::Max ? "max" : "min"}, {"budget", budget()}};
  bool any = false;
  for (const TrialRecord& t : trials) any = any || (t.status != Status::Failed && !std::isnan(t.score()));
  if (any) j["best"] = best().id;
  Json ts = Json::array();
  for (const TrialRecord& t : trials) ts.push_back(record_json(t));
  j["trials"] = ts;
  return j.dump(1) + "\n";
}

void Result::write_csv(const std::string& path) const { write_file_atomic(path, csv()); }
void Result::write_json(const std::string& path) const { write_file_atomic(path, json()); }

}  // namespace brisk::tune
