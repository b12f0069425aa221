//! The engine alone: the model check of the protocol (`model`), property tests of the ops (`ops_props`) and reads
//! that patch the last board (`read_patch`), through the engine's public API. One test binary.

mod model;
mod ops_props;
mod read_patch;
