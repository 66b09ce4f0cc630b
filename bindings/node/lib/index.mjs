import cjs from './index.cjs';
export const { version } = cjs;
export default cjs;
