# frozen_string_literal: true

module MistriLocks
  VERSION = "0.1.0"
end
