//! Rollouts: who is in a cohort, and whether what two cohorts did differs by more than chance.

/// A share of subscribers is counted in hundredths of a percent: 10,000 is everyone.
pub const EVERYONE: u32 = 10_000;

/// Where a subscriber falls on the line from 0 to [`EVERYONE`]: a stable hash (64-bit FNV-1a)
/// of its id. Every process and every release places a subscriber alike, so a cohort is the
/// same wherever it is computed, and raising a share only adds subscribers.
#[allow(clippy::cast_possible_truncation)] // A remainder below EVERYONE, which is a u32.
pub fn position(subscriber_id: &str) -> u32 {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in subscriber_id.bytes() {
        hash ^= u64::from(byte);
        hash = hash.wrapping_mul(0x0100_0000_01b3);
    }
    (hash % u64::from(EVERYONE)) as u32
}

/// Whether a subscriber is in a cohort of `basis_points` of everyone.
pub fn in_share(subscriber_id: &str, basis_points: u32) -> bool {
    position(subscriber_id) < basis_points
}

/// How far a candidate's rate is from a baseline's, and whether that is more than chance.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Difference {
    /// Candidate minus baseline.
    pub difference: f64,
    /// The two-proportion z statistic (pooled).
    pub z: f64,
    /// |z| above the 95% two-sided critical value.
    pub significant: bool,
}

/// The two-sided critical value of the standard normal at 95%.
const Z_95: f64 = 1.959_963_984_540_054;

/// A two-proportion z-test of `candidate` (hits, of n) against `baseline`. `None` when either
/// has no observations: there is nothing to compare yet.
pub fn compare_proportions(baseline: (u64, u64), candidate: (u64, u64)) -> Option<Difference> {
    let ((x1, n1), (x2, n2)) = (baseline, candidate);
    if n1 == 0 || n2 == 0 {
        return None;
    }
    let (x1, n1, x2, n2) = (x1 as f64, n1 as f64, x2 as f64, n2 as f64);
    let (p1, p2) = (x1 / n1, x2 / n2);
    let pooled = (x1 + x2) / (n1 + n2);
    let se = (pooled * (1.0 - pooled) * (1.0 / n1 + 1.0 / n2)).sqrt();
    // Both all hits or both none: no variance, so no difference to speak of.
    let z = if se > 0.0 { (p2 - p1) / se } else { 0.0 };
    Some(Difference {
        difference: p2 - p1,
        z,
        significant: z.abs() > Z_95,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn raising_a_share_only_adds_subscribers(id in ".{0,40}", low in 0u32..=EVERYONE, high in 0u32..=EVERYONE) {
            let (low, high) = (low.min(high), low.max(high));
            if in_share(&id, low) {
                prop_assert!(in_share(&id, high));
            }
            prop_assert!(!in_share(&id, 0));
            prop_assert!(in_share(&id, EVERYONE));
        }

        #[test]
        fn a_difference_is_bounded_and_antisymmetric(x1 in 0u64..1000, extra1 in 0u64..1000, x2 in 0u64..1000, extra2 in 0u64..1000) {
            let (a, b) = ((x1, x1 + extra1 + 1), (x2, x2 + extra2 + 1));
            let ab = compare_proportions(a, b).unwrap();
            let ba = compare_proportions(b, a).unwrap();
            prop_assert!(ab.difference.abs() <= 1.0);
            prop_assert!((ab.difference + ba.difference).abs() < 1e-12);
            prop_assert!((ab.z + ba.z).abs() < 1e-9);
            prop_assert_eq!(ab.significant, ba.significant);
        }
    }

    #[test]
    fn a_share_takes_about_that_share() {
        for basis_points in [500, 5_000, 9_000] {
            let n = 20_000;
            let inside = (0..n)
                .filter(|i| in_share(&format!("sub_{i}"), basis_points))
                .count();
            let expected = n * basis_points as usize / EVERYONE as usize;
            assert!(
                inside.abs_diff(expected) < n / 50,
                "{basis_points}: {inside} of {n}"
            );
        }
    }

    #[test]
    fn positions_are_stable_across_releases() {
        // Pinned: a change here would move subscribers between cohorts mid-rollout.
        assert_eq!(position(""), (0xcbf2_9ce4_8422_2325u64 % 10_000) as u32);
        assert_eq!(position("a"), (0xaf63_dc4c_8601_ec8cu64 % 10_000) as u32);
    }

    #[test]
    fn the_z_test_agrees_with_a_worked_example() {
        // 20 of 400 against 40 of 400: pooled 0.075, se 0.018623, z 2.6846.
        let d = compare_proportions((20, 400), (40, 400)).unwrap();
        assert!((d.difference - 0.05).abs() < 1e-12);
        assert!((d.z - 2.6846).abs() < 1e-3, "{}", d.z);
        assert!(d.significant);
        let same = compare_proportions((20, 400), (22, 400)).unwrap();
        assert!(!same.significant);
        assert_eq!(compare_proportions((0, 0), (1, 2)), None);
        assert_eq!(compare_proportions((0, 10), (0, 10)).unwrap().z, 0.0);
    }
}
