# frozen_string_literal: true

# Checks the gem's RBS signatures (ARGV[0], the installed gem's sig/)
# against the loaded library, by reflection: the classes and modules of the
# public surface are declared; for each declared one, every public method
# (instance and singleton, defined by the gem) has a signature and every
# signature names a real method; and each signature's required positional
# arguments and keywords are the method's own (Method#parameters). Run by
# tests/packaging/run.sh with the installed platform gem.
require "rbs"
require "mistri_locks"
# The integrations that load no framework of their own (Sidekiq would).
require "mistri_locks/integrations/active_job"
require "mistri_locks/integrations/rails_cache"
require "mistri_locks/integrations/web"

sig_dir = ARGV.fetch(0)
REQUIRED = %w[
  MistriLocks MistriLocks::Locks MistriLocks::Memory MistriLocks::Redis MistriLocks::Local MistriLocks::Postgres
  MistriLocks::Hold MistriLocks::AbortSignal MistriLocks::Error MistriLocks::ConfigError
  MistriLocks::ConnectionError MistriLocks::BackendError MistriLocks::SystemResourceError
  MistriLocks::Job MistriLocks::Job::Interrupted MistriLocks::Job::Conflict MistriLocks::Web MistriLocks::Metrics
].freeze

loader = RBS::EnvironmentLoader.new(core_root: nil)
loader.add(path: Pathname(sig_dir))
env = RBS::Environment.from_loader(loader).resolve_type_names
decls = {}
env.class_decls.each do |type_name, entry|
  name = type_name.to_s.delete_prefix("::")
  next unless name.start_with?("MistriLocks")

  members = entry.decls.flat_map { |d| d.decl.members }.grep(RBS::AST::Members::MethodDefinition)
  decls[name] = members
end

failures = []
missing = REQUIRED - decls.keys
failures << "no declaration for #{missing.join(', ')}" unless missing.empty?

def runtime_methods(mod)
  inst = mod.public_instance_methods(false).to_h { |n| [n, mod.instance_method(n)] }
  single = mod.singleton_methods(false).to_h { |n| [n, mod.method(n)] }
  # A class's `new` runs initialize: its signature is initialize's.
  if mod.is_a?(Class) && !single.key?(:new) && mod.private_instance_methods(false).include?(:initialize)
    inst[:initialize] = mod.instance_method(:initialize)
  end
  { instance: inst, singleton: single }
end

def check_arity(where, member, meth, failures)
  params = meth.parameters
  return if params.any? { |kind, _| kind == :rest } # native variadic: checked at run time

  req = params.count { |kind, _| kind == :req }
  opt = params.count { |kind, _| kind == :opt }
  keyreq = params.filter_map { |kind, n| n if kind == :keyreq }.sort
  keys = params.filter_map { |kind, n| n if %i[key keyreq].include?(kind) }
  keyrest = params.any? { |kind, _| kind == :keyrest }
  types = member.respond_to?(:overloads) ? member.overloads.map(&:method_type) : member.types # rbs 3 : rbs 2
  ok = types.any? do |method_type|
    fn = method_type.type
    next true unless fn.is_a?(RBS::Types::Function)

    fn.required_positionals.size == req && fn.optional_positionals.size == opt &&
      fn.required_keywords.keys.sort == keyreq &&
      (keyrest || fn.optional_keywords.keys.all? { |k| keys.include?(k) })
  end
  failures << "#{where}: signature disagrees with #{params.inspect}" unless ok
end

decls.each do |name, members|
  mod = Object.const_get(name)
  runtime = runtime_methods(mod)
  sigs = { instance: {}, singleton: {} }
  members.each do |m|
    kinds = m.kind == :singleton_instance ? %i[instance singleton] : [m.kind]
    kinds.each { |k| sigs[k][m.name] = m }
  end
  %i[instance singleton].each do |kind|
    sep = kind == :singleton ? "." : "#"
    (runtime[kind].keys - sigs[kind].keys).each { |n| failures << "#{name}#{sep}#{n} has no signature" }
    (sigs[kind].keys - runtime[kind].keys).each do |n|
      next if n == :initialize && mod.private_instance_methods(false).include?(:initialize)

      failures << "#{name}#{sep}#{n} is signed but not defined"
    end
    (sigs[kind].keys & runtime[kind].keys).each do |n|
      check_arity("#{name}#{sep}#{n}", sigs[kind][n], runtime[kind][n], failures)
    end
  end
end

if failures.empty?
  puts "   #{decls.size} classes and modules, #{decls.values.sum(&:size)} method signatures: all match the library"
else
  warn failures.map { |f| "   RBS: #{f}" }
  exit 1
end
