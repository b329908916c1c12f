//! The generator's allocator: the system's (glibc's), with a small per-thread cache of freed
//! small blocks in front of it.
//!
//! Why: a pod's objects are hundreds of small strings and lists, made while its manifest is
//! read and translated and freed together once its units are written. glibc's own thread cache
//! keeps 7 blocks of a size, so most of those calls took its slower paths: malloc and free were
//! a third of the generator's instructions. Here a freed block of up to 512 bytes goes onto a
//! list of its size class, and the next request of that class takes it back: a few instructions
//! each way. mimalloc did as well for speed but raised the peak RSS (docs/benchmarks.md); this
//! cache holds at most 32 KiB per size class and thread, and a block in it is one glibc would
//! otherwise keep for reuse in its own bins, so the peak stays where it was.
//!
//! Invariants: a cached block was allocated from the system with its class's size and an
//! alignment of 16 and is handed out only for layouts of that class with an alignment of at
//! most 16; anything larger or more aligned goes to the system as it is. The lists are
//! thread-local, const-initialised and without destructors (so using them inside the allocator
//! never allocates); a block freed on another thread than the one that allocated it simply joins
//! that thread's list.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::ptr;

/// Size-class width, and the alignment every cached block has.
const GRAIN: usize = 16;
/// Classes of 16, 32, ... 512 bytes.
const CLASSES: usize = 32;
const MAX_SMALL: usize = GRAIN * CLASSES;
/// At most this many bytes of free blocks per class and thread.
const CLASS_BYTES: usize = 32 * 1024;

pub struct Cached;

struct Bin {
    head: Cell<*mut Free>,
    len: Cell<usize>,
}

/// A free block's first word: the next free block of its class.
struct Free {
    next: *mut Free,
}

thread_local! {
    static BINS: [Bin; CLASSES] = const {
        [const { Bin { head: Cell::new(ptr::null_mut()), len: Cell::new(0) } }; CLASSES]
    };
}

/// The class of a layout the cache serves, or None.
fn class(layout: Layout) -> Option<usize> {
    let size = layout.size();
    (size != 0 && size <= MAX_SMALL && layout.align() <= GRAIN).then(|| (size - 1) / GRAIN)
}

fn class_layout(class: usize) -> Layout {
    // SAFETY: (class + 1) * 16 is a non-zero multiple of the power-of-two alignment 16.
    unsafe { Layout::from_size_align_unchecked((class + 1) * GRAIN, GRAIN) }
}

unsafe impl GlobalAlloc for Cached {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let Some(c) = class(layout) else {
            // SAFETY: the caller's layout, passed on.
            return unsafe { System.alloc(layout) };
        };
        let reused = BINS
            .try_with(|bins| {
                let bin = &bins[c];
                let head = bin.head.get();
                if head.is_null() {
                    return ptr::null_mut();
                }
                // SAFETY: a block on the list is a free block of this class; its first word
                // holds the next one.
                bin.head.set(unsafe { (*head).next });
                bin.len.set(bin.len.get() - 1);
                head.cast::<u8>()
            })
            .unwrap_or(ptr::null_mut());
        if reused.is_null() {
            // SAFETY: a valid, non-zero layout.
            unsafe { System.alloc(class_layout(c)) }
        } else {
            reused
        }
    }

    unsafe fn dealloc(&self, block: *mut u8, layout: Layout) {
        let Some(c) = class(layout) else {
            // SAFETY: the block came from System.alloc with this layout (see alloc).
            return unsafe { System.dealloc(block, layout) };
        };
        let kept = BINS
            .try_with(|bins| {
                let bin = &bins[c];
                if bin.len.get() >= CLASS_BYTES / ((c + 1) * GRAIN) {
                    return false;
                }
                let free = block.cast::<Free>();
                // SAFETY: the block is ours now, at least 16 bytes and 16-aligned.
                unsafe {
                    free.write(Free {
                        next: bin.head.get(),
                    })
                };
                bin.head.set(free);
                bin.len.set(bin.len.get() + 1);
                true
            })
            .unwrap_or(false);
        if !kept {
            // SAFETY: every block of a class comes from System.alloc with the class's layout.
            unsafe { System.dealloc(block, class_layout(c)) }
        }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        if class(layout).is_none() {
            // SAFETY: the caller's layout, passed on.
            return unsafe { System.alloc_zeroed(layout) };
        }
        // SAFETY: as alloc; the block has at least layout.size() bytes to clear.
        unsafe {
            let block = self.alloc(layout);
            if !block.is_null() {
                block.write_bytes(0, layout.size());
            }
            block
        }
    }

    unsafe fn realloc(&self, block: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: the caller guarantees new_size, rounded to the alignment, fits an isize.
        let new_layout = unsafe { Layout::from_size_align_unchecked(new_size, layout.align()) };
        match (class(layout), class(new_layout)) {
            // SAFETY: neither side is cached: the system's block, passed on.
            (None, None) => unsafe { System.realloc(block, layout, new_size) },
            (Some(a), Some(b)) if a == b => block,
            // SAFETY: a new block of the new layout, the old one's bytes that fit, the old one
            // freed as it was allocated.
            _ => unsafe {
                let moved = self.alloc(new_layout);
                if !moved.is_null() {
                    ptr::copy_nonoverlapping(block, moved, layout.size().min(new_size));
                    self.dealloc(block, layout);
                }
                moved
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classes_cover_small_layouts_only() {
        let l = |s, a| Layout::from_size_align(s, a).unwrap();
        assert_eq!(class(l(1, 1)), Some(0));
        assert_eq!(class(l(16, 8)), Some(0));
        assert_eq!(class(l(17, 8)), Some(1));
        assert_eq!(class(l(512, 16)), Some(31));
        assert_eq!(class(l(513, 8)), None);
        assert_eq!(class(l(0, 1)), None);
        assert_eq!(class(l(64, 32)), None);
    }

    #[test]
    fn blocks_are_reused_grown_and_shrunk_intact() {
        let a = Cached;
        let l = Layout::from_size_align(24, 8).unwrap();
        unsafe {
            let p = a.alloc(l);
            p.write_bytes(7, 24);
            a.dealloc(p, l);
            let q = a.alloc(l);
            assert_eq!(p, q, "a freed block of the class comes back");
            q.write_bytes(9, 24);
            // Within the class: the same block; across classes and to the system: the bytes move.
            let r = a.realloc(q, l, 30);
            assert_eq!(r, q);
            let big = a.realloc(r, Layout::from_size_align(30, 8).unwrap(), 4000);
            assert!((0..24).all(|i| *big.add(i) == 9));
            let small = a.realloc(big, Layout::from_size_align(4000, 8).unwrap(), 20);
            assert!((0..20).all(|i| *small.add(i) == 9));
            a.dealloc(small, Layout::from_size_align(20, 8).unwrap());
            let z = a.alloc_zeroed(l);
            assert!((0..24).all(|i| *z.add(i) == 0));
            a.dealloc(z, l);
        }
    }

    #[test]
    fn a_full_class_hands_blocks_back_to_the_system() {
        let a = Cached;
        let l = Layout::from_size_align(512, 16).unwrap();
        let limit = CLASS_BYTES / 512;
        let blocks: Vec<_> = (0..limit + 10).map(|_| unsafe { a.alloc(l) }).collect();
        for b in &blocks {
            unsafe { a.dealloc(*b, l) };
        }
        BINS.with(|bins| assert_eq!(bins[31].len.get(), limit));
    }
}
