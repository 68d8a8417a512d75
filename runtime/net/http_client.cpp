#include "net/http_client.hpp"

#include <curl/curl.h>
#include <strings.h>
#include <sys/resource.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <mutex>
#include <stdexcept>

namespace rl::net {

namespace {

void global_init_once() {
  static std::once_flag once;
  std::call_once(once, [] {
    // curl_global_init is not thread-safe in older libcurls: once per process.
    curl_global_init(CURL_GLOBAL_DEFAULT);
    // A host with ~1k connections in flight (plus its servers) outgrows the
    // common 1024 soft fd limit; curl's multi-socket API (and our epoll loop)
    // has no FD_SETSIZE ceiling, so raise the soft limit to the hard one.
    rlimit lim{};
    if (getrlimit(RLIMIT_NOFILE, &lim) == 0 && lim.rlim_cur < lim.rlim_max) {
      lim.rlim_cur = lim.rlim_max;
      setrlimit(RLIMIT_NOFILE, &lim);
    }
  });
}

std::string lower(std::string s) {
  for (auto& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

std::string trim(std::string_view s) {
  size_t a = 0, b = s.size();
  while (a < b && (s[a] == ' ' || s[a] == '\t')) ++a;
  while (b > a && (s[b - 1] == ' ' || s[b - 1] == '\t' || s[b - 1] == '\r' || s[b - 1] == '\n')) --b;
  return std::string(s.substr(a, b - a));
}

std::string seconds(double s) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", s);
  return buf;
}

// "scheme://host:port" for the per-host queue, or "" when the URL does not parse.
std::string host_key(const std::string& url, std::string& error) {
  CURLU* u = curl_url();
  std::string key;
  CURLUcode rc = curl_url_set(u, CURLUPART_URL, url.c_str(), 0);
  char *scheme = nullptr, *host = nullptr, *port = nullptr;
  if (rc == CURLUE_OK) rc = curl_url_get(u, CURLUPART_SCHEME, &scheme, 0);
  if (rc == CURLUE_OK) rc = curl_url_get(u, CURLUPART_HOST, &host, 0);
  if (rc == CURLUE_OK) rc = curl_url_get(u, CURLUPART_PORT, &port, CURLU_DEFAULT_PORT);
  if (rc == CURLUE_OK) {
    key = std::string(scheme) + "://" + host + ":" + port;
  } else {
    error = std::string("bad URL (") + curl_url_strerror(rc) + ")";
  }
  curl_free(scheme);
  curl_free(host);
  curl_free(port);
  curl_url_cleanup(u);
  return key;
}

}  // namespace

enum class State { queued, active, done };

struct HttpClient::Transfer {
  HttpClient* owner = nullptr;
  uint64_t id = 0;
  HttpRequest req;
  DoneFn done;
  ChunkFn on_chunk;
  std::string key;       // host queue key
  int limit = 0;         // per-host limit for this request
  double submitted = 0;  // loop clock
  double started = 0;    // handed to curl (0 = never)
  double deadline = 0;   // 0 = none
  double timeout = 0;
  double connect_timeout = 0;
  State state = State::queued;
  std::list<Transfer*>::iterator queue_pos;
  uint64_t queue_timer = 0;
  CURL* easy = nullptr;
  curl_slist* header_list = nullptr;
  std::string pending_chunk;  // streamed bytes not yet handed to on_chunk
  HttpResult result;
  char errbuf[CURL_ERROR_SIZE] = {0};
  size_t body_bytes = 0;   // response body bytes so far
  bool too_large = false;  // over req.max_body_bytes

  std::string prefix() const { return req.method + " " + req.url + ": "; }

  static size_t on_header(char* data, size_t size, size_t n, void* self) {
    auto* t = static_cast<Transfer*>(self);
    std::string_view line(data, size * n);
    if (line.rfind("HTTP/", 0) == 0) {
      t->result.response.headers.clear();  // a new response (after 100-continue or a redirect)
    } else if (auto colon = line.find(':'); colon != std::string_view::npos) {
      t->result.response.headers.emplace_back(lower(trim(line.substr(0, colon))), trim(line.substr(colon + 1)));
    } else if (trim(line).empty() && t->easy) {
      // End of a header block: the status is known before any body byte, so a
      // streaming caller (the router's relay) can read it through peek().
      long code = 0;
      curl_easy_getinfo(t->easy, CURLINFO_RESPONSE_CODE, &code);
      t->result.response.status = code;
    }
    return size * n;
  }

  // Runs inside curl: only buffers. Streamed bytes are handed to on_chunk by
  // run_callbacks() once curl has returned.
  static size_t on_body(char* data, size_t size, size_t n, void* self) {
    auto* t = static_cast<Transfer*>(self);
    t->body_bytes += size * n;
    if (t->req.max_body_bytes > 0 && t->body_bytes > t->req.max_body_bytes) {
      t->too_large = true;
      return 0;  // fails the transfer (CURLE_WRITE_ERROR)
    }
    if (!t->on_chunk) {
      t->result.response.body.append(data, size * n);
    } else {
      if (t->pending_chunk.empty()) t->owner->chunk_ready_.push_back(t->id);
      t->pending_chunk.append(data, size * n);
    }
    return size * n;
  }
};

HttpClient::HttpClient(EventLoop& loop, Options opts) : loop_(loop), opts_(opts) {
  global_init_once();
  if (opts_.max_per_host < 1) throw std::invalid_argument("HttpClient: max_per_host must be >= 1");
  multi_ = curl_multi_init();
  if (!multi_) throw std::runtime_error("HttpClient: curl_multi_init failed");
  curl_multi_setopt(multi_, CURLMOPT_SOCKETFUNCTION, &HttpClient::on_socket);
  curl_multi_setopt(multi_, CURLMOPT_SOCKETDATA, this);
  curl_multi_setopt(multi_, CURLMOPT_TIMERFUNCTION, &HttpClient::on_timer);
  curl_multi_setopt(multi_, CURLMOPT_TIMERDATA, this);
  curl_multi_setopt(multi_, CURLMOPT_MAXCONNECTS, opts_.max_connections);
}

HttpClient::~HttpClient() {
  for (auto& [id, t] : transfers_) {
    if (t->queue_timer) loop_.cancel_timer(t->queue_timer);
    if (t->easy) {
      curl_multi_remove_handle(multi_, t->easy);
      curl_easy_cleanup(t->easy);
    }
    curl_slist_free_all(t->header_list);
  }
  transfers_.clear();
  for (void* e : free_easy_) curl_easy_cleanup(static_cast<CURL*>(e));
  curl_multi_cleanup(multi_);  // closes cached connections (may call on_socket)
  if (curl_timer_) loop_.cancel_timer(curl_timer_);
  if (callbacks_timer_) loop_.cancel_timer(callbacks_timer_);
  for (int fd : watched_) loop_.unwatch(fd);
}

void HttpClient::set_options(const Options& opts) {
  if (opts.max_per_host < 1) throw std::invalid_argument("HttpClient: max_per_host must be >= 1");
  opts_ = opts;
  curl_multi_setopt(multi_, CURLMOPT_MAXCONNECTS, opts_.max_connections);
}

HttpClient::Stats HttpClient::stats() const {
  Stats s = stats_;
  s.queued = 0;
  s.active = 0;
  for (auto& [key, h] : hosts_) {
    s.queued += h.queue.size();
    s.active += static_cast<size_t>(h.active);
  }
  return s;
}

const HttpResponse* HttpClient::peek(uint64_t id) const {
  auto it = transfers_.find(id);
  return it == transfers_.end() ? nullptr : &it->second->result.response;
}

uint64_t HttpClient::submit(HttpRequest req, DoneFn done, ChunkFn on_chunk) {
  auto owned = std::make_unique<Transfer>();
  Transfer* t = owned.get();
  t->owner = this;
  t->id = next_id_++;
  stats_.submitted++;
  t->req = std::move(req);
  t->done = std::move(done);
  t->on_chunk = std::move(on_chunk);
  t->submitted = EventLoop::now();
  t->timeout = t->req.timeout_s > 0 ? t->req.timeout_s : opts_.timeout_s;
  t->connect_timeout = t->req.connect_timeout_s > 0 ? t->req.connect_timeout_s : opts_.connect_timeout_s;
  t->deadline = t->timeout > 0 ? t->submitted + t->timeout : 0;
  t->limit = t->req.max_per_host > 0 ? t->req.max_per_host : opts_.max_per_host;
  transfers_.emplace(t->id, std::move(owned));

  std::string error;
  t->key = host_key(t->req.url, error);
  if (t->key.empty()) {
    HttpResult r;
    r.error = t->prefix() + error;
    finish(t, std::move(r));  // delivered from the loop, never from inside submit()
    return t->id;
  }
  Host& h = hosts_[t->key];
  if (h.queue.empty() && h.active < t->limit) {
    start(t);
  } else {
    // Strict FIFO per host: a later request never overtakes a queued one.
    t->queue_pos = h.queue.insert(h.queue.end(), t);
    if (t->deadline > 0) {
      const uint64_t id = t->id;
      t->queue_timer = loop_.call_later(t->deadline - EventLoop::now(), [this, id] { expire_queued(id); });
    }
  }
  return t->id;
}

void HttpClient::expire_queued(uint64_t id) {
  auto it = transfers_.find(id);
  if (it == transfers_.end() || it->second->state != State::queued) return;
  Transfer* t = it->second.get();
  t->queue_timer = 0;
  Host& h = hosts_[t->key];
  h.queue.erase(t->queue_pos);
  HttpResult r;
  r.timed_out = true;
  r.error = t->prefix() + "timed out after " + seconds(t->timeout) + " s (still queued behind " +
            std::to_string(h.active) + " active requests to " + t->key + ", limit " +
            std::to_string(t->limit) + "; never sent)";
  finish(t, std::move(r));
  pump_host(t->key);  // the next in line may fit under its own limit
}

void HttpClient::start(Transfer* t) {
  if (t->queue_timer) loop_.cancel_timer(t->queue_timer);
  t->queue_timer = 0;
  const double now = EventLoop::now();
  if (t->deadline > 0 && now >= t->deadline) {
    HttpResult r;
    r.timed_out = true;
    r.error = t->prefix() + "timed out after " + seconds(t->timeout) + " s (while queued; never sent)";
    finish(t, std::move(r));
    return;
  }
  CURL* e = static_cast<CURL*>(take_easy());
  t->easy = e;
  const HttpRequest& rq = t->req;
  curl_easy_setopt(e, CURLOPT_PRIVATE, t);
  curl_easy_setopt(e, CURLOPT_URL, rq.url.c_str());
  curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(e, CURLOPT_PROTOCOLS_STR, "http,https");
  curl_easy_setopt(e, CURLOPT_ERRORBUFFER, t->errbuf);
  if (!opts_.use_env_proxy) curl_easy_setopt(e, CURLOPT_PROXY, "");  // "" disables env proxies
  if (rq.follow_redirects) {
    curl_easy_setopt(e, CURLOPT_FOLLOWLOCATION, 1L);
    curl_easy_setopt(e, CURLOPT_MAXREDIRS, 10L);
  }
  if (rq.fresh_connection) {
    curl_easy_setopt(e, CURLOPT_FRESH_CONNECT, 1L);
    curl_easy_setopt(e, CURLOPT_FORBID_REUSE, 1L);
  }
  if (rq.max_body_bytes > 0)  // a larger Content-Length fails before any body byte
    curl_easy_setopt(e, CURLOPT_MAXFILESIZE_LARGE, static_cast<curl_off_t>(rq.max_body_bytes));
  // Timeouts: what is left of the total after queueing; connect never beyond it.
  if (t->deadline > 0) {
    const long left_ms = std::max(1L, static_cast<long>(std::ceil((t->deadline - now) * 1000)));
    curl_easy_setopt(e, CURLOPT_TIMEOUT_MS, left_ms);
    curl_easy_setopt(e, CURLOPT_CONNECTTIMEOUT_MS,
                     std::min(left_ms, static_cast<long>(std::ceil(t->connect_timeout * 1000))));
  } else if (t->connect_timeout > 0) {
    curl_easy_setopt(e, CURLOPT_CONNECTTIMEOUT_MS, static_cast<long>(std::ceil(t->connect_timeout * 1000)));
  }
  // Method and body. POSTFIELDS points into t->req's body, which outlives the transfer.
  const std::string& body = rq.shared_body ? *rq.shared_body : rq.body;
  if (rq.method == "HEAD") {
    curl_easy_setopt(e, CURLOPT_NOBODY, 1L);
  } else if (rq.method == "GET" && body.empty()) {
    curl_easy_setopt(e, CURLOPT_HTTPGET, 1L);
  } else {
    if (!body.empty() || rq.method == "POST") {
      curl_easy_setopt(e, CURLOPT_POSTFIELDSIZE_LARGE, static_cast<curl_off_t>(body.size()));
      curl_easy_setopt(e, CURLOPT_POSTFIELDS, body.data());
    }
    if (rq.method != "POST") curl_easy_setopt(e, CURLOPT_CUSTOMREQUEST, rq.method.c_str());
  }
  bool typed = false;   // the caller gave a Content-Type
  for (auto& [name, value] : rq.headers) {
    std::string line = value.empty() ? name + ";" : name + ": " + value;  // "name;" sends an empty value
    t->header_list = curl_slist_append(t->header_list, line.c_str());
    typed = typed || strcasecmp(name.c_str(), "content-type") == 0;
  }
  // No "Expect: 100-continue" round trip before large bodies: local servers
  // answer fast, and a server that ignores it would cost us a 1 s stall.
  t->header_list = curl_slist_append(t->header_list, "Expect:");
  // A body sent without a Content-Type goes without one (as Python's requests and httpx
  // send bytes), not as libcurl's default "application/x-www-form-urlencoded": a
  // server would parse it as a form (cpp-httplib refuses a form over 8 KiB with 413).
  if (!typed) t->header_list = curl_slist_append(t->header_list, "Content-Type:");
  curl_easy_setopt(e, CURLOPT_HTTPHEADER, t->header_list);
  curl_easy_setopt(e, CURLOPT_HEADERFUNCTION, &Transfer::on_header);
  curl_easy_setopt(e, CURLOPT_HEADERDATA, t);
  curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, &Transfer::on_body);
  curl_easy_setopt(e, CURLOPT_WRITEDATA, t);

  t->state = State::active;
  t->started = now;
  hosts_[t->key].active++;
  stats_.started++;
  const CURLMcode mc = curl_multi_add_handle(multi_, e);
  if (mc != CURLM_OK) {
    hosts_[t->key].active--;
    t->easy = nullptr;
    give_back_easy(e);
    HttpResult r;
    r.error = t->prefix() + "cannot start transfer (" + curl_multi_strerror(mc) + ")";
    finish(t, std::move(r));
  }
  // curl_multi_add_handle asked for a timer through on_timer: the transfer
  // actually begins when that timer fires on the loop.
}

void HttpClient::pump_host(const std::string& key) {
  auto it = hosts_.find(key);
  if (it == hosts_.end()) return;
  Host& h = it->second;
  while (!h.queue.empty() && h.active < h.queue.front()->limit) {
    Transfer* t = h.queue.front();
    h.queue.pop_front();
    start(t);
  }
  if (h.queue.empty() && h.active == 0) hosts_.erase(it);
}

int HttpClient::on_socket(void* easy, int fd, int what, void* self, void* socketp) {
  auto* c = static_cast<HttpClient*>(self);
  try {
    if (what == CURL_POLL_REMOVE) {
      c->loop_.unwatch(fd);
      c->watched_.erase(fd);
      return 0;
    }
    uint32_t events = 0;
    if (what & CURL_POLL_IN) events |= EPOLLIN;
    if (what & CURL_POLL_OUT) events |= EPOLLOUT;
    if (c->watched_.count(fd)) {
      c->loop_.modify(fd, events);
    } else {
      c->loop_.watch(fd, events, [c, fd](uint32_t ev) {
        int mask = 0;
        if (ev & EPOLLIN) mask |= CURL_CSELECT_IN;
        if (ev & EPOLLOUT) mask |= CURL_CSELECT_OUT;
        if (ev & (EPOLLERR | EPOLLHUP)) mask |= CURL_CSELECT_ERR;
        c->socket_action(fd, mask);
      });
      c->watched_.insert(fd);
    }
    return 0;
  } catch (...) {
    return -1;  // curl fails the transfers on this socket; never throw through C
  }
}

int HttpClient::on_timer(void* multi, long timeout_ms, void* self) {
  auto* c = static_cast<HttpClient*>(self);
  if (c->curl_timer_) c->loop_.cancel_timer(c->curl_timer_);
  c->curl_timer_ = 0;
  if (timeout_ms < 0) return 0;
  // Never drive curl from inside its own callback: the loop calls us back.
  c->curl_timer_ = c->loop_.call_later(static_cast<double>(timeout_ms) / 1000.0, [c] {
    c->curl_timer_ = 0;
    c->socket_action(CURL_SOCKET_TIMEOUT, 0);
  });
  return 0;
}

void HttpClient::socket_action(int fd, int ev_bitmask) {
  int running = 0;
  curl_multi_socket_action(multi_, fd, ev_bitmask, &running);
  collect_finished();
  run_callbacks();
}

void HttpClient::collect_finished() {
  std::vector<std::string> freed_hosts;
  int left = 0;
  while (CURLMsg* msg = curl_multi_info_read(multi_, &left)) {
    if (msg->msg != CURLMSG_DONE) continue;
    CURL* e = msg->easy_handle;
    const CURLcode code = msg->data.result;
    Transfer* t = nullptr;
    curl_easy_getinfo(e, CURLINFO_PRIVATE, reinterpret_cast<char**>(&t));
    HttpResult r = std::move(t->result);
    long connects = 0;
    curl_easy_getinfo(e, CURLINFO_NUM_CONNECTS, &connects);
    stats_.connections_opened += static_cast<uint64_t>(connects);
    if (code == CURLE_OK) {
      r.ok = true;
      curl_easy_getinfo(e, CURLINFO_RESPONSE_CODE, &r.response.status);
      curl_off_t us = 0;
      curl_easy_getinfo(e, CURLINFO_CONNECT_TIME_T, &us);
      r.response.timings.connect_s = static_cast<double>(us) / 1e6;
      curl_easy_getinfo(e, CURLINFO_STARTTRANSFER_TIME_T, &us);
      r.response.timings.ttfb_s = static_cast<double>(us) / 1e6;
    } else {
      r.ok = false;
      // Failures before the request left: no connection, or no name for the host.
      r.sent = !(code == CURLE_COULDNT_CONNECT || code == CURLE_COULDNT_RESOLVE_HOST ||
                 code == CURLE_COULDNT_RESOLVE_PROXY || code == CURLE_SSL_CONNECT_ERROR ||
                 code == CURLE_UNSUPPORTED_PROTOCOL || code == CURLE_URL_MALFORMAT);
      std::string detail = t->errbuf;
      if (code == CURLE_OPERATION_TIMEDOUT) {
        r.timed_out = true;
        const bool connecting = detail.rfind("Connection timed out", 0) == 0 ||
                                detail.rfind("Failed to connect", 0) == 0;
        r.error = t->prefix() + (connecting ? "connect timed out after " + seconds(t->connect_timeout)
                                            : "timed out after " + seconds(t->timeout)) + " s";
      } else if (t->too_large || code == CURLE_FILESIZE_EXCEEDED) {
        r.error = t->prefix() + "response body over the limit of " + std::to_string(t->req.max_body_bytes) +
                  " bytes (max_body)";
        detail.clear();
      } else {
        r.error = t->prefix() + curl_easy_strerror(code);
      }
      if (!detail.empty()) r.error += " (" + detail + ")";
    }
    curl_multi_remove_handle(multi_, e);
    t->easy = nullptr;
    give_back_easy(e);
    hosts_[t->key].active--;
    freed_hosts.push_back(t->key);
    finish(t, std::move(r));
  }
  for (auto& key : freed_hosts) pump_host(key);
}

// Marks t done with `result`; its callbacks run from the loop (run_callbacks).
void HttpClient::finish(Transfer* t, HttpResult&& result) {
  const double now = EventLoop::now();
  t->state = State::done;
  t->result = std::move(result);
  t->result.response.timings.queued_s = (t->started > 0 ? t->started : now) - t->submitted;
  t->result.response.timings.total_s = now - t->submitted;
  curl_slist_free_all(t->header_list);
  t->header_list = nullptr;
  done_ready_.push_back(t->id);
  schedule_callbacks();
}

void HttpClient::schedule_callbacks() {
  if (in_callbacks_ || callbacks_timer_) return;
  callbacks_timer_ = loop_.call_later(0, [this] {
    callbacks_timer_ = 0;
    run_callbacks();
  });
}

void HttpClient::run_callbacks() {
  if (in_callbacks_) return;
  in_callbacks_ = true;
  if (callbacks_timer_) {
    loop_.cancel_timer(callbacks_timer_);
    callbacks_timer_ = 0;
  }
  // A throwing callback must not wedge the client: what was not delivered yet
  // goes back on the lists for the next round, then the exception propagates.
  std::vector<uint64_t> chunks, dones;
  size_t ci = 0, di = 0;
  try {
    while (!chunk_ready_.empty() || !done_ready_.empty()) {
      chunks = std::move(chunk_ready_);
      chunk_ready_.clear();
      // Streamed bytes first, so a stream's last chunk precedes its completion.
      for (ci = 0; ci < chunks.size(); ++ci) {
        auto it = transfers_.find(chunks[ci]);
        if (it == transfers_.end() || it->second->pending_chunk.empty()) continue;
        std::string bytes = std::move(it->second->pending_chunk);
        it->second->pending_chunk.clear();
        ChunkFn fn = it->second->on_chunk;  // copy: the callback may cancel the transfer
        fn(bytes);
      }
      dones = std::move(done_ready_);
      done_ready_.clear();
      for (di = 0; di < dones.size(); ++di) {
        auto it = transfers_.find(dones[di]);
        if (it == transfers_.end()) continue;  // cancelled meanwhile
        std::unique_ptr<Transfer> t = std::move(it->second);
        transfers_.erase(it);
        stats_.finished++;
        if (t->on_chunk && !t->pending_chunk.empty()) t->on_chunk(t->pending_chunk);
        if (t->done) t->done(std::move(t->result));
      }
      chunks.clear();
      dones.clear();
    }
  } catch (...) {
    if (ci < chunks.size()) chunk_ready_.insert(chunk_ready_.end(), chunks.begin() + ci + 1, chunks.end());
    if (di < dones.size()) done_ready_.insert(done_ready_.end(), dones.begin() + di + 1, dones.end());
    in_callbacks_ = false;
    if (!chunk_ready_.empty() || !done_ready_.empty()) schedule_callbacks();
    throw;
  }
  in_callbacks_ = false;
}

bool HttpClient::cancel(uint64_t id) {
  auto it = transfers_.find(id);
  if (it == transfers_.end()) return false;
  Transfer* t = it->second.get();
  if (t->queue_timer) loop_.cancel_timer(t->queue_timer);
  std::string freed;
  if (t->state == State::queued) {
    hosts_[t->key].queue.erase(t->queue_pos);
    freed = t->key;
  } else if (t->state == State::active) {
    curl_multi_remove_handle(multi_, t->easy);  // closes that connection: it is mid-response
    give_back_easy(t->easy);
    t->easy = nullptr;
    hosts_[t->key].active--;
    freed = t->key;
  }
  stats_.finished++;
  stats_.cancelled++;
  curl_slist_free_all(t->header_list);
  transfers_.erase(it);
  if (!freed.empty()) pump_host(freed);
  return true;
}

void* HttpClient::take_easy() {
  if (!free_easy_.empty()) {
    void* e = free_easy_.back();
    free_easy_.pop_back();
    return e;
  }
  CURL* e = curl_easy_init();
  if (!e) throw std::runtime_error("HttpClient: curl_easy_init failed (out of memory?)");
  return e;
}

void HttpClient::give_back_easy(void* easy) {
  if (free_easy_.size() < opts_.max_free_handles) {
    curl_easy_reset(static_cast<CURL*>(easy));
    free_easy_.push_back(easy);
  } else {
    curl_easy_cleanup(static_cast<CURL*>(easy));
  }
}

}  // namespace rl::net
