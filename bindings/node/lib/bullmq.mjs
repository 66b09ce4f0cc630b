// The BullMQ face as an ES module: the CommonJS implementation (bullmq.cjs),
// so `import` and `require` share one Conflict class and one Interrupted.
import cjs from './bullmq.cjs';

export const { leased, stop, stopKey, jobRef, Conflict, Interrupted } = cjs;
export default cjs;
