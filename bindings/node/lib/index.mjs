// ESM entry: the same objects as the CommonJS entry (one module instance).
import cjs from './index.cjs';

export const {
  open,
  configure,
  hold,
  request,
  jobStopKey,
  operatorHandler,
  Locks,
  Lease,
  LocksError,
  Interrupted,
  version,
} = cjs;
export default cjs;
