//! Python face (work in progress).
