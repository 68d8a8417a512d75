#include "net/text_server.hpp"

#include <future>

namespace rl::net {

TextServer::TextServer(Options opts) : opts_(std::move(opts)) {
  EventServer::Options so;
  so.host = opts_.host;
  so.port = opts_.port;
  so.allow_remote = opts_.allow_remote;
  so.limits.max_body_bytes = opts_.max_body_bytes;
  so.max_connections = opts_.max_connections;
  so.header_timeout_s = opts_.header_timeout_s;
  so.idle_timeout_s = opts_.idle_timeout_s;
  so.name = opts_.name;
  server_ = std::make_unique<EventServer>(loop_, so, [this](ServerRequest& req, std::shared_ptr<Responder> res) {
    handle(req, res);
  });
  server_->start();  // throws: nothing runs yet
  port_ = server_->port();
  url_ = server_->url();
  running_ = true;
  thread_ = std::thread([this] { loop_.run(); });
}

TextServer::~TextServer() { stop(); }

void TextServer::stop() {
  if (!running_) return;
  running_ = false;
  std::promise<void> stopped;
  loop_.post([this, &stopped] {
    server_->stop();  // closes the listening socket and every connection
    loop_.stop();
    stopped.set_value();
  });
  stopped.get_future().wait();
  thread_.join();
}

void TextServer::set(const std::string& path, std::string content_type, std::string body) {
  auto b = std::make_shared<const std::string>(std::move(body));
  std::lock_guard lk(mu_);
  texts_[path] = Entry{std::move(content_type), std::move(b)};
}

void TextServer::handle(ServerRequest& req, const std::shared_ptr<Responder>& res) {
  Entry e;
  bool found = false;
  {
    std::lock_guard lk(mu_);
    if (auto it = texts_.find(req.path); it != texts_.end()) {
      e = it->second;
      found = true;
    }
  }
  const ResponseHeaders text_plain = {{"Content-Type", "text/plain; charset=utf-8"}};
  if (!found) {
    res->send(404, text_plain, "not found" + (opts_.not_found_hint.empty() ? "" : "; " + opts_.not_found_hint) + "\n");
    return;
  }
  if (req.method != "GET" && req.method != "HEAD") {
    res->send(405, {{"Content-Type", "text/plain; charset=utf-8"}, {"Allow", "GET, HEAD"}},
              "method not allowed: " + req.path + " answers GET and HEAD\n");
    return;
  }
  res->send(200, {{"Content-Type", e.content_type}}, *e.body);  // (the event server drops HEAD's body)
}

}  // namespace rl::net
