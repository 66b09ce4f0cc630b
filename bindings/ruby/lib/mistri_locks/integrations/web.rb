# frozen_string_literal: true

require "mistri_locks"

module MistriLocks
  # The operator's page as a Rack app: the same page, JSON, actions and
  # metrics as `mistri-locks serve` (routes and refusals are written once,
  # in the core; docs/OPERATING.md):
  #
  #   GET  /              the page
  #   GET  /api/state     leases and flags as JSON (?prefix=...)
  #   GET  /metrics       Prometheus text: this handle's counters + fleet gauges
  #   POST /api/stop      {"key": "..."}: raise the stop keys of the lease's holders
  #   POST /api/clear     {"key": "..."}: lower a flag
  #   POST /api/break     {"key": "..."}: delete a lease
  #
  # In Rails routes:
  #
  #   mount MistriLocks::Web.new(MistriLocks.locks, allowed_hosts: ["*"]) { |request|  # Host: config.hosts
  #     request.env["warden"].user&.admin?
  #   } => "/locks"
  #
  # Read-only unless an authorize block (or token:) is given. An action then
  # needs the block to return true for the request (a Rack::Request when
  # Rack is loaded, else the env Hash) or `Authorization: Bearer <token>`,
  # a same-origin request and the page's CSRF token. The block runs for
  # actions only: protect viewing with your routes (a constraint, Devise's
  # `authenticate`).
  #
  # Host check (DNS rebinding): a request whose Host is not in
  # +allowed_hosts+ gets 421 before anything is read from the backend.
  # "name" matches that host on any port, "name:port" that port,
  # ".example.com" the domain and its subdomains, "*" any host. The default
  # is the loopback names only (localhost, 127.0.0.1, [::1]): in Rails pass
  # your names, or ["*"] where config.hosts (HostAuthorization) already
  # covers the mount. +trust_forwarded+: true behind a TLS-terminating
  # proxy that sets X-Forwarded-Proto / X-Forwarded-Host (the scheme and
  # host for the Host and same-origin checks come from them).
  class Web
    ACTIONS = %w[/api/stop /api/clear /api/break].freeze
    REASONS = { 200 => "OK", 400 => "Bad Request", 403 => "Forbidden", 404 => "Not Found",
                405 => "Method Not Allowed", 409 => "Conflict", 413 => "Content Too Large",
                421 => "Misdirected Request", 502 => "Bad Gateway" }.freeze
    TOO_LARGE = [413, { "content-type" => "application/json" },
                 ['{"ok":false,"error":"the body is larger than 64 KiB"}']].freeze
    BAD_LENGTH = [400, { "content-type" => "application/json" },
                  ['{"ok":false,"error":"Content-Length must be a non-negative decimal integer"}']].freeze

    attr_reader :locks, :prefix

    def initialize(locks, authorize: nil, token: nil, allow_actions: nil, prefix: "", allowed_hosts: [],
                   trust_forwarded: false, &block)
      unless locks.is_a?(MistriLocks::Locks)
        raise TypeError, "MistriLocks::Web.new takes a MistriLocks::Locks (Memory, Redis, Local, Postgres), got #{locks.class}"
      end
      authorize ||= block
      raise TypeError, "authorize must respond to call(request)" if authorize && !authorize.respond_to?(:call)
      raise TypeError, "prefix must be a String" unless prefix.is_a?(String)
      raise TypeError, "allowed_hosts must be an Array of host names, got #{allowed_hosts.class}" unless allowed_hosts.is_a?(Array)

      allowed_hosts.each do |h|
        raise TypeError, "allowed_hosts: each entry must be a non-empty String, got #{h.inspect}" unless h.is_a?(String) && !h.empty?
      end
      raise TypeError, "trust_forwarded must be true or false" unless [true, false].include?(trust_forwarded)

      @locks = locks
      @authorize = authorize
      @prefix = prefix
      # Built once, here, by the core's one parser, which holds the rules
      # (the token's length; actions need a token or authorize;
      # allow_actions' default): a bad option fails now, and a request
      # passes only its own fields.
      @options = locks.send(:_operator_options, { prefix: prefix, allow_actions: allow_actions, token: token,
                                                  authorize: !authorize.nil?, allowed_hosts: allowed_hosts,
                                                  trust_forwarded: trust_forwarded })
    end

    def call(env)
      length = env["CONTENT_LENGTH"].to_s
      return BAD_LENGTH.map(&:dup) unless length.empty? || length.match?(/\A[0-9]+\z/)
      return TOO_LARGE.map(&:dup) if length.to_i > MistriLocks::OPERATOR_MAX_BODY

      body = length.empty? ? "" : env["rack.input"]&.read(length.to_i).to_s
      method = env["REQUEST_METHOD"].to_s
      path = env["PATH_INFO"].to_s
      path = "/" if path.empty?
      authorized = nil
      authorized = @authorize.call(request_for(env)) ? true : false if method == "POST" && ACTIONS.include?(path) && @authorize
      host = env["HTTP_HOST"] || "#{env["SERVER_NAME"]}:#{env["SERVER_PORT"]}"
      request = {
        method: method, path: path, query: env["QUERY_STRING"].to_s, mount: env["SCRIPT_NAME"].to_s,
        scheme: env["rack.url_scheme"] || "http", host: host,
        forwarded_proto: env["HTTP_X_FORWARDED_PROTO"], forwarded_host: env["HTTP_X_FORWARDED_HOST"],
        origin: env["HTTP_ORIGIN"], authorization: env["HTTP_AUTHORIZATION"], csrf: env["HTTP_X_CSRF_TOKEN"],
        cookie: env["HTTP_COOKIE"], body: body, host_authorized: authorized
      }
      status, headers, out = @locks.send(:_operator_handle, request, @options)
      response_headers = {}
      headers.each { |k, v| response_headers[k.downcase] = v }
      out = "" if method == "HEAD"
      [status, response_headers, [out]]
    end

    private

    def request_for(env)
      defined?(::Rack::Request) ? ::Rack::Request.new(env) : env
    end
  end
end
