package org.example.orders;

import java.math.BigDecimal;
import java.util.ArrayList;
import java.util.Collections;
import java.util.List;
import java.util.Objects;

/**
 * An order with lines, a status and a computed total.
 */
public final class Order {

    public enum Status { OPEN, PAID, SHIPPED, CANCELLED }

    /** One product line; quantities are positive. */
    public record Line(String sku, int quantity, BigDecimal unitPrice) {
        public Line {
            Objects.requireNonNull(sku, "sku");
            if (quantity <= 0) {
                throw new IllegalArgumentException("quantity must be positive: " + quantity);
            }
        }

        public BigDecimal total() {
            return unitPrice.multiply(BigDecimal.valueOf(quantity));
        }
    }

    private final String id;
    private final List<Line> lines = new ArrayList<>();
    private Status status = Status.OPEN;

    public Order(String id) {
        this.id = Objects.requireNonNull(id, "id");
    }

    public String id() {
        return id;
    }

    public void addLine(String sku, int quantity, BigDecimal unitPrice) {
        requireStatus(Status.OPEN, "add lines to");
        lines.add(new Line(sku, quantity, unitPrice));
    }

    public List<Line> lines() {
        return Collections.unmodifiableList(lines);
    }

    public BigDecimal total() {
        return lines.stream().map(Line::total).reduce(BigDecimal.ZERO, BigDecimal::add);
    }

    @Override
    public String toString() {
        return "Order{" + id + ", " + status + ", " + lines.size() + " lines}";
    }

    public void pay() {
        requireStatus(Status.OPEN, "pay");
        status = Status.PAID;
    }

    private void requireStatus(Status expected, String action) {
        if (status != expected) {
            throw new IllegalStateException("cannot " + action + " an order that is " + status);
        }
    }
}
