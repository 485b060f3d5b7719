//! Reasons tied to their metric labels: [`reasons!`](crate::reasons!) declares a reason enum
//! (and, if asked, a struct of one counter per reason) from one list, so that a reason cannot
//! exist without its label, nor a counter without being exported.
//!
//! Used by both daemons for every reason that becomes a `reason` (or `kind`) label: the copier's
//! engine (drops, failures, SYN ends, sheds), its sender and workers, the intercept's drops, refused
//! control connections and closed ones.

/// Declares a reason enum from one list, and optionally a counts struct: every reason has a
/// label (the name after `=>`, stable: it becomes the metric label) and, with the struct, a
/// counter exported under that label. The enum gets `ALL` (every reason, in declaration
/// order) and `label()`; the struct (a `u64` field per reason, named as the label) gets `add`,
/// `get` and `iter` (`(label, count)` for each reason).
///
/// ```
/// common::reasons! {
///     /// Why a thing was dropped.
///     enum Why;
///     /// Things dropped, by reason.
///     struct WhyCounts;
///     /// Too short.
///     Short => short,
///     /// Too late.
///     Late => too_late,
/// }
/// common::reasons! {
///     /// How a thing ended (labels only).
///     enum End;
///     /// Done.
///     Done => done,
/// }
/// let mut c = WhyCounts::default();
/// c.add(Why::Late, 2);
/// assert_eq!(Why::Late.label(), "too_late");
/// assert_eq!(c.iter().collect::<Vec<_>>(), [("short", 0), ("too_late", 2)]);
/// assert_eq!(End::ALL, &[End::Done]);
/// ```
#[macro_export]
macro_rules! reasons {
    (
        $(#[$em:meta])* enum $enum:ident;
        $(#[$cm:meta])* struct $counts:ident;
        $( $(#[$fm:meta])* $variant:ident => $field:ident, )*
    ) => {
        $crate::reasons! {
            $(#[$em])* enum $enum;
            $( $(#[$fm])* $variant => $field, )*
        }

        $(#[$cm])*
        #[derive(Debug, Clone, Default, PartialEq, Eq)]
        pub struct $counts {
            $( $(#[$fm])* pub $field: u64, )*
        }

        impl $counts {
            /// Count `n` more for `r`.
            pub fn add(&mut self, r: $enum, n: u64) {
                *self.get_mut(r) += n;
            }

            /// The count of `r`.
            #[must_use]
            pub fn get(&self, r: $enum) -> u64 {
                match r {
                    $($enum::$variant => self.$field,)*
                }
            }

            fn get_mut(&mut self, r: $enum) -> &mut u64 {
                match r {
                    $($enum::$variant => &mut self.$field,)*
                }
            }

            /// `(reason label, count)` pairs, every reason.
            pub fn iter(&self) -> impl Iterator<Item = (&'static str, u64)> + '_ {
                $enum::ALL.iter().map(move |&r| (r.label(), self.get(r)))
            }
        }
    };
    (
        $(#[$em:meta])* enum $enum:ident;
        $( $(#[$fm:meta])* $variant:ident => $field:ident, )*
    ) => {
        $(#[$em])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq)]
        pub enum $enum {
            $( $(#[$fm])* $variant, )*
        }

        impl $enum {
            /// Every reason, in export order.
            pub const ALL: &'static [$enum] = &[$($enum::$variant),*];

            /// The metric label.
            #[must_use]
            pub fn label(self) -> &'static str {
                match self {
                    $($enum::$variant => stringify!($field),)*
                }
            }
        }
    };
}
