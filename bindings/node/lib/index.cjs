'use strict';
const native = require('./native.cjs');
module.exports = { version: native.version() };
