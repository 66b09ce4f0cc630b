# frozen_string_literal: true

# The operator's page as a Rack app (MistriLocks::Web) and the metrics
# (MistriLocks::Metrics), driven with Debian's rack-test: the same JSON,
# actions and refusals as `mistri-locks serve`; every exposition checked by
# `promtool check metrics`.

require_relative "test_helper"
require "json"
require "open3"
require "rack"
require "rack/test"
require "mistri_locks/integrations/web"

module OperatorTestHelpers
  TOKEN = "0123456789abcdef-token"
  ORIGIN = "http://example.org" # rack-test's default host
  HOSTS = ["example.org"].freeze # the default is the loopback names only

  def promtool!(text)
    out, status = Open3.capture2e("promtool", "check", "metrics", stdin_data: text)
    assert status.success?, "promtool refused:\n#{out}\n#{text}"
  end

  # Loads the page (mounted at +mount+) and returns its CSRF token; the
  # cookie stays in rack-test's jar.
  def load_page(mount = "")
    get "#{mount}/"
    assert_equal 200, last_response.status
    cookie = last_response.headers["set-cookie"] || last_response.headers["Set-Cookie"]
    token = cookie[/mistri_locks_csrf=([0-9a-f]+)/, 1]
    assert token
    assert_includes last_response.body, %(content="#{token}")
    token
  end

  def post_json(path, key, headers = {})
    post path, JSON.generate(key: key), { "CONTENT_TYPE" => "application/json" }.merge(headers)
    last_response
  end
end

class WebReadOnlyTest < Minitest::Test
  include Rack::Test::Methods
  include OperatorTestHelpers

  def setup
    @locks = MistriLocks::Memory.new
  end

  def app = MistriLocks::Web.new(@locks, allowed_hosts: HOSTS)

  def test_read_only_by_default_no_buttons_and_403_on_post
    @locks.set_flag("stop:x", ttl: 60)
    csrf = load_page
    assert_includes last_response.body, '<meta name="mistri-actions" content="off">'
    assert_match(/default-src 'none'/, last_response.headers["content-security-policy"])
    r = post_json("/api/clear", "stop:x", "HTTP_ORIGIN" => ORIGIN, "HTTP_X_CSRF_TOKEN" => csrf)
    assert_equal 403, r.status
    assert_match(/read-only/, JSON.parse(r.body)["error"])
    assert @locks.flag?("stop:x")
  end

  def test_state_is_the_listing_escaped
    evil = "<img src=x onerror=alert(1)>"
    h1 = @locks.hold("report:42", ttl: 10, heartbeat: 1)
    h2 = @locks.hold(evil, ttl: 10, heartbeat: 1)
    get "/api/state", prefix: ""
    assert_equal 200, last_response.status
    assert_equal "application/json", last_response.headers["content-type"]
    refute_includes last_response.body, "<"
    doc = JSON.parse(last_response.body)
    assert_equal ["report:42", evil].sort, doc["leases"].map { |l| l["key"] }.sort
    lease = doc["leases"].find { |l| l["key"] == "report:42" }
    assert_equal h1.fence, lease["fence"]
    assert_equal false, lease["holders"][0]["stuck"]
    get "/api/state", prefix: "report:"
    assert_equal ["report:42"], JSON.parse(last_response.body)["leases"].map { |l| l["key"] }
  ensure
    h1&.release
    h2&.release
  end

  def test_metrics_pass_promtool
    hold = @locks.hold("job", ttl: 10, heartbeat: 1)
    assert_nil @locks.hold("job", ttl: 10)
    text = MistriLocks::Metrics.text(@locks)
    promtool!(text)
    assert_includes text, "mistri_locks_holds_active 1\n"
    assert_includes text, %(mistri_locks_acquisitions_total{outcome="refused"} 1\n)
    get "/metrics"
    assert_equal 200, last_response.status
    assert last_response.headers["content-type"].start_with?("text/plain; version=0.0.4")
    promtool!(last_response.body)
    assert_includes last_response.body, "mistri_locks_fleet_leases_held 1\n"
    status, headers, body = MistriLocks::Metrics.rack(@locks).call("REQUEST_METHOD" => "GET")
    assert_equal [200, MistriLocks::Metrics::CONTENT_TYPE], [status, headers["content-type"]]
    promtool!(body.join)
    assert_raises(TypeError) { MistriLocks::Metrics.text(Object.new) }
  ensure
    hold&.release
  end
end

class WebActionsTest < Minitest::Test
  include Rack::Test::Methods
  include OperatorTestHelpers

  def setup
    @locks = MistriLocks::Memory.new
    @allowed = true
    @seen = []
  end

  def app
    allowed = -> { @allowed }
    seen = @seen
    inner = MistriLocks::Web.new(@locks, prefix: "job", allowed_hosts: HOSTS) do |request|
      seen << request
      allowed.call
    end
    Rack::URLMap.new("/locks" => inner)
  end

  def test_actions_need_authorize_same_origin_and_the_pages_csrf_token
    other = @locks.new_owner
    assert other.acquire("job:1", ttl: 30)
    csrf = load_page("/locks")
    assert_match(%r{Path=/locks; SameSite=Strict; HttpOnly}, last_response.headers["set-cookie"])
    good = { "HTTP_ORIGIN" => ORIGIN, "HTTP_X_CSRF_TOKEN" => csrf }
    assert_equal 403, post_json("/locks/api/break", "job:1", {}).status # no origin, no token
    assert_equal 403, post_json("/locks/api/break", "job:1", good.merge("HTTP_ORIGIN" => "http://evil.example")).status
    assert_equal 403, post_json("/locks/api/break", "job:1", good.merge("HTTP_X_CSRF_TOKEN" => "nope")).status
    @allowed = false
    assert_equal 403, post_json("/locks/api/break", "job:1", good).status
    @allowed = true
    assert_equal 403, post_json("/locks/api/break", "elsewhere", good).status # outside the prefix
    assert @locks.held?("job:1")
    get "/locks/api/break"
    assert_equal 405, last_response.status
    r = post_json("/locks/api/break", "job:1", good)
    assert_equal 200, r.status, r.body
    refute @locks.held?("job:1")
    assert_kind_of Rack::Request, @seen.last
    @locks.set_flag("job:stop", ttl: 60)
    assert_equal 200, post_json("/locks/api/clear", "job:stop", good).status
    refute @locks.flag?("job:stop")
    post "/locks/api/clear", "{", "CONTENT_TYPE" => "application/json", **good
    assert_equal 400, last_response.status
  end
end

class WebTokenTest < Minitest::Test
  include Rack::Test::Methods
  include OperatorTestHelpers

  def setup
    @locks = MistriLocks::Memory.new
  end

  def app = MistriLocks::Web.new(@locks, token: TOKEN, allowed_hosts: HOSTS)

  def test_a_bearer_token_authorises_scripts
    @locks.set_flag("stop:x", ttl: 60)
    assert_equal 403, post_json("/api/clear", "stop:x").status
    assert_equal 403, post_json("/api/clear", "stop:x", "HTTP_AUTHORIZATION" => "Bearer wrong-token-0123").status
    assert_equal 403, post_json("/api/clear", "stop:x", "HTTP_AUTHORIZATION" => "Bearer #{TOKEN}",
                                                        "HTTP_ORIGIN" => "http://evil.example").status
    assert_equal 200, post_json("/api/clear", "stop:x", "HTTP_AUTHORIZATION" => "Bearer #{TOKEN}").status
    refute @locks.flag?("stop:x")
    assert_raises(ArgumentError) { MistriLocks::Web.new(@locks, token: "short") }
    assert_raises(ArgumentError) { MistriLocks::Web.new(@locks, allow_actions: true) }
    assert_raises(TypeError) { MistriLocks::Web.new(Object.new) }
  end

  # Finding 15 (Rack): CONTENT_LENGTH "-5" raised ArgumentError from
  # rack.input.read (a 500) and "abc" was read as no body (44a85b1). Both are
  # 400 now, before the body is read; above the largest body stays 413.
  def test_a_content_length_that_is_not_a_length_is_400
    @locks.set_flag("f", ttl: 60)
    body = JSON.generate(key: "f")
    call = lambda do |length|
      env = Rack::MockRequest.env_for("/api/clear", method: "POST", input: body, "CONTENT_TYPE" => "application/json",
                                                    "HTTP_AUTHORIZATION" => "Bearer #{TOKEN}", "CONTENT_LENGTH" => length)
      status, _, out = app.call(env)
      [status, out.join]
    end
    ["-5", "abc", "1e3", " 5", "+5", "5 "].each do |bad|
      status, out = call.call(bad)
      assert_equal 400, status, "#{bad.inspect}: #{out}"
      assert_match(/Content-Length/, JSON.parse(out)["error"])
    end
    assert @locks.flag?("f")
    assert_equal 413, call.call((1 << 20).to_s)[0]
    assert_equal 200, call.call(body.bytesize.to_s)[0]
    refute @locks.flag?("f")
  end

  def test_stop_raises_the_holders_stop_key
    worker = @locks.new_owner
    hold = worker.hold("report:42", ttl: 10, heartbeat: 0.05, stop_key: "report:42:stop")
    r = post_json("/api/stop", "report:42", "HTTP_AUTHORIZATION" => "Bearer #{TOKEN}")
    assert_equal 200, r.status, r.body
    # Tripped within a tick (50 ms); the bound is the flag's ttl.
    assert hold.signal.wait(5)
  ensure
    hold&.release
  end
end

# Findings 4 and 13 (Rack): the Host check and a TLS-terminating proxy.
class WebHostTest < Minitest::Test
  include OperatorTestHelpers

  def setup
    @locks = MistriLocks::Memory.new
    @locks.set_flag("secret:stop", ttl: 60)
  end

  def request(app, path, method: "GET", body: nil, headers: {})
    env = Rack::MockRequest.env_for(path, method: method, input: body, **headers)
    status, response_headers, out = app.call(env)
    [status, response_headers, out.join]
  end

  # A DNS-rebinding request (its Host not one of the app's names) got the
  # whole state (44a85b1). The app passes allowed_hosts to the core, which
  # answers 421 before it reads the backend; the default is the loopback
  # names (fail closed).
  def test_the_host_check_refuses_other_hosts_with_421
    default = MistriLocks::Web.new(@locks)
    ["localhost", "localhost:3000", "127.0.0.1:9", "[::1]:3000"].each do |ok|
      assert_equal 200, request(default, "/api/state", headers: { "HTTP_HOST" => ok })[0], ok
    end
    ["evil.example", "example.org", "localhost.evil.example"].each do |bad|
      status, _, out = request(default, "/api/state", headers: { "HTTP_HOST" => bad })
      assert_equal 421, status, "#{bad}: #{out}"
      refute_includes out, "secret"
    end
    named = MistriLocks::Web.new(@locks, allowed_hosts: ["app.example", ".corp.example", "ops.example:9000"])
    ["app.example:3000", "corp.example", "a.b.corp.example:1", "ops.example:9000"].each do |ok|
      assert_equal 200, request(named, "/api/state", headers: { "HTTP_HOST" => ok })[0], ok
    end
    ["evil.example", "ops.example:9001", "xcorp.example", "localhost"].each do |bad|
      assert_equal 421, request(named, "/api/state", headers: { "HTTP_HOST" => bad })[0], bad
    end
    anything = MistriLocks::Web.new(@locks, allowed_hosts: ["*"])
    assert_equal 200, request(anything, "/api/state", headers: { "HTTP_HOST" => "evil.example" })[0]
    acting = MistriLocks::Web.new(@locks, token: TOKEN)
    status, = request(acting, "/api/clear", method: "POST", body: JSON.generate(key: "secret:stop"),
                                            headers: { "HTTP_HOST" => "evil.example", "CONTENT_TYPE" => "application/json",
                                                       "HTTP_AUTHORIZATION" => "Bearer #{TOKEN}" })
    assert_equal 421, status
    assert @locks.flag?("secret:stop")
  end

  # Behind a TLS-terminating proxy every action was 403 (Origin https://…
  # against the request's http). With trust_forwarded the scheme and host
  # come from X-Forwarded-Proto/-Host, for the Host and same-origin checks.
  def test_behind_a_tls_proxy_trust_forwarded_takes_scheme_and_host_from_the_proxy
    proxied = { "HTTP_HOST" => "127.0.0.1:3000", "HTTP_X_FORWARDED_PROTO" => "https",
                "HTTP_X_FORWARDED_HOST" => "ops.example" }
    clear = lambda do |app|
      @locks.set_flag("f", ttl: 60)
      _, headers, = request(app, "/", headers: proxied)
      cookie = headers["set-cookie"][/mistri_locks_csrf=[0-9a-f]+/]
      request(app, "/api/clear", method: "POST", body: JSON.generate(key: "f"),
                                 headers: proxied.merge("CONTENT_TYPE" => "application/json", "HTTP_COOKIE" => cookie,
                                                        "HTTP_ORIGIN" => "https://ops.example",
                                                        "HTTP_X_CSRF_TOKEN" => cookie.split("=")[1]))[0]
    end
    behind = MistriLocks::Web.new(@locks, allowed_hosts: ["ops.example"], trust_forwarded: true) { true }
    assert_equal 200, clear.call(behind)
    refute @locks.flag?("f")
    status, = request(behind, "/api/state", headers: proxied.merge("HTTP_X_FORWARDED_HOST" => "evil.example"))
    assert_equal 421, status
    plain = MistriLocks::Web.new(@locks, allowed_hosts: ["ops.example", "127.0.0.1"]) { true }
    assert_equal 403, clear.call(plain), "without trust_forwarded the action is cross-origin"
    assert @locks.flag?("f")
  end

  # The options reach the core by name: a misspelt field is an error, not
  # an absent value; bad allowed_hosts are refused at construction.
  def test_host_options_are_checked_and_passed_by_name
    assert_raises(TypeError) { MistriLocks::Web.new(@locks, allowed_hosts: "app.example") }
    assert_raises(TypeError) { MistriLocks::Web.new(@locks, allowed_hosts: [""]) }
    assert_raises(TypeError) { MistriLocks::Web.new(@locks, trust_forwarded: "yes") }
    e = assert_raises(ArgumentError) { @locks.send(:_operator_options, { allowed_host: ["*"] }) }
    assert_match(/unknown option field :allowed_host/, e.message)
    plain = @locks.send(:_operator_options, {})
    e = assert_raises(ArgumentError) { @locks.send(:_operator_handle, { hots: "x" }, plain) }
    assert_match(/unknown request field :hots/, e.message)
    assert_raises(TypeError) { @locks.send(:_operator_options, { allowed_hosts: "app.example" }) }
    assert_raises(TypeError) { @locks.send(:_operator_handle, { "method" => "GET" }, plain) }
    any_host = @locks.send(:_operator_options, { allowed_hosts: ["*"] })
    status, = @locks.send(:_operator_handle, { method: "GET", path: "/api/state", host: "x.example" }, any_host)
    assert_equal 200, status
  end

  # The options are built once, by the core's parser, when the app is made,
  # and the app holds the native result: a 15-character token is the core's
  # ArgumentError from Web.new, before any request; a request passes only
  # its own fields (the options are the built object, not a Hash read again
  # per request).
  def test_a_bad_option_fails_when_the_app_is_made
    fifteen = "0123456789abcde"
    e = assert_raises(ArgumentError) { MistriLocks::Web.new(@locks, token: fifteen, allowed_hosts: HOSTS) }
    assert_match(/token must be a string of at least 16 characters/, e.message)
    built = @locks.send(:_operator_options, { token: "#{fifteen}f", allowed_hosts: HOSTS })
    assert_instance_of MistriLocks::OperatorOptions, built
    assert built.allow_actions?
    assert_raises(TypeError) { MistriLocks::OperatorOptions.new }
    # A Hash is no longer read per request.
    assert_raises(TypeError) { @locks.send(:_operator_handle, { method: "GET" }, { allowed_hosts: HOSTS }) }
    status, = @locks.send(:_operator_handle, { method: "GET", path: "/api/state", host: HOSTS.first }, built)
    assert_equal 200, status
  end
end
