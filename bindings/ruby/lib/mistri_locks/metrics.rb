# frozen_string_literal: true

module MistriLocks
  # Prometheus metrics of a handle: the same text every face exposes
  # (docs/OPERATING.md has the table), read from `locks.stats` at each call.
  #
  #   MistriLocks::Metrics.text(MistriLocks.locks)    # => "# HELP mistri_locks_holds_active ..."
  #
  # As a Rack endpoint (a Rails route, or next to prometheus-client's exporter):
  #
  #   mount MistriLocks::Metrics.rack(MistriLocks.locks) => "/metrics/locks"
  module Metrics
    CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

    # The counters of +locks+ in the Prometheus text format.
    def self.text(locks)
      unless locks.is_a?(MistriLocks::Locks)
        raise TypeError, "MistriLocks::Metrics.text takes a MistriLocks::Locks, got #{locks.class}"
      end

      locks.send(:_stats_prometheus)
    end

    # A Rack app answering every GET with .text(locks).
    def self.rack(locks)
      text(locks) # checks the argument now
      lambda do |env|
        unless %w[GET HEAD].include?(env["REQUEST_METHOD"])
          return [405, { "content-type" => "text/plain", "allow" => "GET, HEAD" }, ["use GET\n"]]
        end

        [200, { "content-type" => CONTENT_TYPE, "cache-control" => "no-store" }, [text(locks)]]
      end
    end
  end
end
