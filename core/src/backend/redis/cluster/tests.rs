use super::map::SlotMap;
use super::*;

#[test]
fn slots_follow_the_hash_tag() {
    // Every key of one user KEY lands in one slot.
    assert_eq!(slot_of("ns:lease:{job}"), slot_of("ns:fence:{job}"));
    assert_eq!(slot_of("ns:flag:{job}"), slot_of("{job}"));
    // Known values (CLUSTER KEYSLOT): foo 12182, {user1000}.following
    // 3443, an empty tag hashes the whole key.
    assert_eq!(slot_of("foo"), 12182);
    assert_eq!(slot_of("{user1000}.following"), 3443);
    assert_eq!(slot_of("foo{}{bar}"), slot_of("foo{}{bar}"));
    assert_eq!(slot_of("{}x"), slot_of("{}x"));
}

#[test]
fn slot_map_sets_and_lists_masters() {
    let mut map = SlotMap::empty();
    map.set(1, "a:1");
    map.set(2, "b:2");
    map.set(3, "a:1");
    assert_eq!(map.node_of(3), Some("a:1"));
    assert_eq!(map.node_of(4), None);
    assert_eq!(map.masters(), ["a:1", "b:2"]);
}
