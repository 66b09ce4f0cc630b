# frozen_string_literal: true

module MistriLocks
  # Base class of every error raised by mistri_locks itself. Bad arguments
  # are Ruby's own ArgumentError (an empty key, a zero, negative or NaN
  # TTL) and TypeError (a key that is not a String or Symbol, a TTL that is
  # not a number).
  class Error < StandardError; end

  # The adapter could not be set up as asked: an unparsable Redis URL, a
  # TLS setup failure, an authentication refusal.
  class ConfigError < Error; end

  # The backend could not be reached or stopped answering (connection
  # refused, reset, timed out after 5 s).
  class ConnectionError < Error; end

  # The backend answered, but with an error.
  class BackendError < Error; end

  # The operating system refused something needed (a thread, randomness).
  # The same name as in Python (Ruby's own ::SystemError is about errno).
  class SystemResourceError < Error; end
end
