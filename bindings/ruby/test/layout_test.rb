# frozen_string_literal: true

# The binding and its framework integrations sit apart (issue 40 item 8):
# lib/mistri_locks/integrations/ holds the ActiveJob, Sidekiq, Rails cache
# and Rack faces; `require "mistri_locks"` loads none of them and no
# framework, and each is required by its own path.
require_relative "test_helper"
require "open3"

class LayoutTest < Minitest::Test
  LIB = Subprocess::LIB
  INTEGRATIONS = %w[active_job rails_cache sidekiq web].freeze

  def ruby(script)
    out, status = Open3.capture2e(RbConfig.ruby, "-I", LIB, "-e", script)
    assert status.success?, out
    out
  end

  def test_require_mistri_locks_loads_no_integration_and_no_framework
    out = ruby(<<~RUBY)
      require "mistri_locks"
      MistriLocks::Job.stop_key("x")   # the framework-free job rules (autoloaded)
      MistriLocks::Metrics
      loaded = $LOADED_FEATURES.grep(%r{/mistri_locks/integrations/}).map { |f| File.basename(f) }
      consts = %i[Sidekiq RailsCache Web].select { |c| MistriLocks.const_defined?(c, false) }
      consts << :ActiveJobFace if MistriLocks::Job.const_defined?(:ActiveJobFace, false)
      frameworks = %w[::Sidekiq ::Rack ::ActiveJob ::ActiveSupport ::Rails].select { |c| Object.const_defined?(c) }
      print [loaded, consts, frameworks].inspect
    RUBY
    assert_equal "[[], [], []]", out, "[integration files loaded, integration constants, frameworks]"
  end

  def test_the_binding_files_require_no_integration
    binding_files = Dir[File.join(LIB, "**", "*.rb")].reject { |f| f.include?("/mistri_locks/integrations/") }
    assert_includes binding_files.map { |f| File.basename(f) }, "job.rb"
    wired = binding_files.flat_map do |file|
      File.readlines(file).each_with_index.filter_map do |line, i|
        "#{file}:#{i + 1}: #{line.strip}" if line =~ /^\s*(require|require_relative|autoload|load)\b.*integrations/
      end
    end
    assert_empty wired, "the binding must not load its integrations"
  end

  def test_each_integration_loads_by_its_path_and_the_old_paths_are_gone
    INTEGRATIONS.each do |name|
      assert File.file?(File.join(LIB, "mistri_locks", "integrations", "#{name}.rb")), name
    end
    out = ruby(<<~RUBY)
      require "mistri_locks"
      gone = %w[sidekiq rails_cache web].select do |old|
        require "mistri_locks/\#{old}"
        false
      rescue LoadError
        true
      end
      require "mistri_locks/integrations/active_job"
      require "mistri_locks/integrations/rails_cache"
      require "mistri_locks/integrations/web"
      print [gone, MistriLocks::RailsCache.class, MistriLocks::Web.class,
             MistriLocks::Job.const_defined?(:ActiveJobFace, false)].inspect
    RUBY
    assert_equal %([["sidekiq", "rails_cache", "web"], Module, Class, true]), out
  end

  def test_including_job_without_the_activejob_integration_is_refused
    out = ruby(<<~RUBY)
      require "mistri_locks"
      begin
        Class.new { include MistriLocks::Job }
        print "included"
      rescue MistriLocks::Error => e
        print e.message
      end
    RUBY
    assert_match(%r{needs the ActiveJob integration: require "mistri_locks/integrations/active_job"}, out)
  end
end
