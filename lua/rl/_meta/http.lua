---@meta
-- LuaLS type stubs for rl.http (never loaded at run time). See docs/http.md.

---@class rl.http
rl.http = {}

---@class rl.http.RequestOpts
---@field url string http:// or https:// URL (required)
---@field method? string upper-case method, default "GET"
---@field headers? table<string, string|number> request headers, sent as given
---@field body? string|rl.http.Body request body (rl.http.post JSON-encodes tables for you); an rl.http.Body is
--- bytes the runtime made (a weight bucket), sent without a copy into Lua, by as many requests at once as need it
---@field timeout? number total seconds, time queued for a connection slot included (default 600, see configure)
---@field connect_timeout? number seconds to establish the TCP connection (default 30)
---@field max_per_host? integer requests to this host:port in flight at once; the rest wait FIFO (default 64)
---@field follow_redirects? boolean follow 3xx Location (up to 10), default false
---@field fresh_connection? boolean a connection of its own, closed after: the request is never resent by libcurl on a stale keep-alive connection (for requests that must reach the server at most once)
---@field max_body? integer largest response body in bytes; beyond, the request fails with nil, err (default: none)
---@field on_chunk? fun(bytes: string) called in the calling task with body bytes as they arrive; the response body is then empty
---@field on_event? fun(ev: rl.http.SseEvent) called in the calling task for each server-sent event of the body

---@class rl.http.Timings
---@field queued number seconds waiting for a per-host slot
---@field connect number seconds to connect (0 on a reused keep-alive connection)
---@field ttfb number seconds from start to the first response byte
---@field total number seconds from the call to the end, queue included

---@class rl.http.Response
---@field status integer HTTP status (4xx/5xx are responses, not errors)
---@field headers table<string, string> lowercase names; repeated headers joined with ", "
---@field body string the body ("" when streamed through on_chunk/on_event)
---@field elapsed number seconds from the call to the end (timings.total)
---@field timings rl.http.Timings

---@class rl.http.SseEvent
---@field event string the "event:" field, default "message"
---@field data string "data:" lines joined with "\n"
---@field id string the last "id:" seen in the stream ("" if none)
---@field retry? integer "retry:" milliseconds, when the event's block had one

--- Sends a request and waits (yielding the task) for the whole response.
--- Transport failures return `nil, err` ("GET http://...: Couldn't connect to server (...)",
--- "... timed out after 0.2 s"); bad options raise, naming the field.
---@param opts rl.http.RequestOpts
---@return rl.http.Response|nil resp
---@return string|nil err
function rl.http.request(opts) end

--- The requests in flight now, oldest first (the hang report lists them).
---@return {method: string, url: string, started: number, task: rl.Task|nil}[]
function rl.http.in_flight() end

--- GET `url` (opts as for request, without url).
---@param url string
---@param opts? rl.http.RequestOpts
---@return rl.http.Response|nil resp
---@return string|nil err
function rl.http.get(url, opts) end

--- POST `body` to `url`. A table body is JSON-encoded and sent with
--- content-type application/json unless opts.headers sets one.
---@param url string
---@param body string|table|rl.http.Body
---@param opts? rl.http.RequestOpts
---@return rl.http.Response|nil resp
---@return string|nil err
function rl.http.post(url, body, opts) end

--- Decodes a response's JSON body. Passes `nil, err` through, so
--- `local v, err = rl.http.json(rl.http.post(url, payload))` works.
---@param resp rl.http.Response|nil
---@param err? string
---@return any|nil value
---@return string|nil err
function rl.http.json(resp, err) end

---@class rl.http.Stats
---@field submitted integer requests submitted
---@field started integer requests handed to libcurl
---@field finished integer requests that ended (response, error or cancel)
---@field cancelled integer of which cancelled
---@field connections_opened integer new TCP connections (keep-alive reuse keeps this low)
---@field queued integer waiting for a per-host slot now
---@field active integer in flight now
---@field pending_server_requests integer server requests waiting for their handler

--- Client counters of this Lua state.
---@return rl.http.Stats
function rl.http.stats() end

---@class rl.http.ClientOpts
---@field max_per_host? integer default per-host limit (64)
---@field max_connections? integer idle keep-alive connections kept (4096)
---@field timeout? number default total timeout in seconds (600)
---@field connect_timeout? number default connect timeout in seconds (30)
---@field use_env_proxy? boolean honour http_proxy/https_proxy/no_proxy (default false)

--- Changes the client's defaults for later requests.
---@param opts rl.http.ClientOpts
function rl.http.configure(opts) end

---@class rl.http.SseParser
local SseParser = {}
--- Parses bytes (any chunking); returns the events completed by them.
---@param bytes string
---@return rl.http.SseEvent[]
function SseParser:feed(bytes) end
--- End of stream: drops an unterminated event.
function SseParser:finish() end

--- A new incremental server-sent-events parser.
---@return rl.http.SseParser
function rl.http.sse_parser() end

-- ---- servers ----------------------------------------------------------------------------

---@class rl.http.Request
---@field method string
---@field path string URL path without the query
---@field query string raw query string ("" if none)
---@field params table<string, string> decoded query parameters
---@field headers table<string, string> lowercase names
---@field body string
---@field remote_addr string
---@field remote_port integer

---@class rl.http.HandlerResult
---@field status? integer default 200
---@field headers? table<string, string>
---@field body? string|table a table is sent as JSON (content-type application/json)

---@class rl.http.ServeOpts
---@field handler? fun(req: rl.http.Request): rl.http.HandlerResult|string runs in its own task per request; may yield
---@field host? string default "127.0.0.1"; anything but loopback needs allow_remote
---@field port? integer default 0: an ephemeral port (see server:port())
---@field allow_remote? boolean allow binding a non-loopback host (the server has no authentication)
---@field static_dir? string serve files from this directory (checked before the handler)
---@field static_mount? string URL prefix for static_dir, default "/"
---@field threads? integer worker threads; each holds one keep-alive connection (default 64)
---@field timeout? number seconds a request may wait for its handler before a 503 (default 300; threaded servers only)
---@field event_driven? boolean serve on the event loop (net::EventServer): no thread per connection, so thousands of held requests (long polls) cost no threads, and a handler may take as long as it likes; needs a handler, takes no threads or static_dir (default false: cpp-httplib's worker threads)
---@field max_body? integer largest request body in bytes (default 256 MiB)

---@class rl.http.Server
local Server = {}
---@return integer port the bound port
function Server:port() end
---@return string url e.g. "http://127.0.0.1:41234"
function Server:url() end
--- Stops accepting; requests still waiting for their handler get 503.
function Server:stop() end
--- Waits (in a task) until the server is stopped.
function Server:wait() end

--- Starts a server. Returns `nil, err` when the port cannot be bound; raises on
--- bad options (including a non-loopback host without allow_remote).
---@param opts rl.http.ServeOpts
---@return rl.http.Server|nil server
---@return string|nil err
function rl.http.serve(opts) end

--- Request-body bytes held by the runtime (e.g. rl.weight_sync's HTTP buckets): passed as
--- `opts.body` without being copied into a Lua string; any number of requests may send one.
---@class rl.http.Body
local Body = {}
---@return integer bytes 0 once released
function Body:size() end
--- Lets the bytes go now (requests still sending them keep them until they end), not at
--- the next collection; a released body cannot be sent again.
function Body:release() end
