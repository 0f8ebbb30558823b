//! Where each call's instance comes from: a fixed pool of slots (wasmtime's pooling allocator),
//! reused from call to call instead of mapping a fresh instance and memory each time. Between
//! two calls a slot's linear memory is reset to the component's initial image: its first
//! [`KEEP_RESIDENT`] bytes in place (`memset`), the rest by returning it to the kernel
//! (`madvise`), so no call sees what another one wrote (tested by a guest that looks for an
//! earlier call's markers). Calls wait for a free slot before their Store is made, so the
//! wait never counts against their deadline.
//!
//! Measured with `plugin bench` (the built-in plugin; the p50 of 1 000 calls, in 6 runs of
//! each, interleaved): a call of 100 pods took 164–171 µs with a fresh mapping each time and
//! 126–146 µs from the pool; a call of 1 000 pods 1 381–1 402 µs and 1 207–1 227 µs. What a
//! slot keeps resident decides it: with 1 MiB kept (the pool tried before) a call gained
//! nothing (144 and 1 288–1 366 µs), because a call of the built-in plugin writes 1.12 MiB at
//! 100 pods and 1.56 MiB at 1 000 (`plugin bench`, `plugin_call_memory_bytes`): the `memset`
//! of the first MiB is paid, and the rest is still returned and faulted in again. Hence 2 MiB.

use std::sync::{Arc, Condvar, Mutex, PoisonError};

use wasmtime::PoolingAllocationConfig;

use super::sandbox::{Limits, MAX_INSTANCES, MAX_MEMORIES, MAX_TABLES};

/// Linear memory a slot keeps resident between calls, reset with `memset`.
pub const KEEP_RESIDENT: usize = 2 << 20;

/// The largest memory a 32-bit Wasm module can have.
const WASM32_MEMORY: usize = 1 << 32;

/// Table bytes a slot keeps resident between calls (a Rust plugin's tables are a few hundred
/// elements).
const TABLE_KEEP_RESIDENT: usize = 64 << 10;

/// The slots: calls at once. Calls are CPU-bound and short, so more than twice the cores run
/// no faster, while each slot used keeps up to [`KEEP_RESIDENT`] bytes resident.
fn slots() -> usize {
    let cores = std::thread::available_parallelism().map_or(2, std::num::NonZero::get);
    (2 * cores).clamp(2, 16)
}

/// The pool's size, and the calls waiting for a slot.
#[derive(Debug)]
pub struct Pool {
    slots: usize,
    table_elements: usize,
    free: Mutex<usize>,
    freed: Condvar,
}

/// A slot taken for one call; given back when dropped (after the call's Store is).
pub struct Slot(Arc<Pool>);

impl Pool {
    pub fn new(limits: Limits) -> Arc<Self> {
        let slots = slots();
        Arc::new(Pool {
            slots,
            table_elements: limits.memory_bytes / std::mem::size_of::<usize>(),
            free: Mutex::new(slots),
            freed: Condvar::new(),
        })
    }

    /// wasmtime's pool: room for [`Pool::slots`] Stores that each use as much as the sandbox
    /// lets one use (its counts of instances, memories and tables).
    ///
    /// The pool checks next to nothing itself: a component over the sandbox's counts is
    /// refused at load with the sandbox's own message (only a single module with more than
    /// twice as many memories or tables as the sandbox allows is refused by the pool), a memory
    /// past the limit by the Store's limiter (which names it); a memory slot spans the whole
    /// 32-bit space (address space only, as every Wasm memory reserves).
    pub fn config(&self) -> PoolingAllocationConfig {
        let slots = u32::try_from(self.slots).unwrap_or(u32::MAX);
        let per = |n: usize| u32::try_from(n).unwrap_or(u32::MAX);
        let mut config = PoolingAllocationConfig::new();
        config
            .total_component_instances(slots)
            .total_core_instances(slots.saturating_mul(per(MAX_INSTANCES)))
            .total_memories(slots.saturating_mul(per(MAX_MEMORIES)))
            .total_tables(slots.saturating_mul(per(MAX_TABLES)))
            .max_core_instances_per_component(u32::MAX)
            .max_memories_per_component(u32::MAX)
            .max_tables_per_component(u32::MAX)
            // wasmtime goes through every memory index up to this when a module is dropped.
            .max_memories_per_module(per(2 * MAX_MEMORIES))
            .max_tables_per_module(per(2 * MAX_TABLES))
            .max_memory_size(WASM32_MEMORY)
            .table_elements(self.table_elements)
            .linear_memory_keep_resident(KEEP_RESIDENT)
            .table_keep_resident(TABLE_KEEP_RESIDENT);
        config
    }

    /// A slot, waiting for one when every slot is in a call.
    pub fn take(self: &Arc<Self>) -> Slot {
        let mut free = self.free.lock().unwrap_or_else(PoisonError::into_inner);
        while *free == 0 {
            free = self
                .freed
                .wait(free)
                .unwrap_or_else(PoisonError::into_inner);
        }
        *free -= 1;
        Slot(self.clone())
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        let pool = &self.0;
        *pool.free.lock().unwrap_or_else(PoisonError::into_inner) += 1;
        pool.freed.notify_one();
    }
}
