//! Ruby face (work in progress).
